// libai-actor: the command-line front end; the commands live in bin/commands.cc.
#include "bin/commands.h"

int main(int argc, char** argv) {
  return libai::cli::run_cli(
      argc, argv,
      {.name = "libai-actor",
       .description = "LiBai-Actor: train and serve transformer models across devices and nodes",
       .commands = libai::cli::commands()});
}
