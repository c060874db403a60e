// libai-actor: the command-line front end; the commands live in bin/commands.cc.
#include "bin/commands.h"

int main(int argc, char** argv) { return libai::cli::run_cli(argc, argv); }
