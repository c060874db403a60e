#include "runtime/host_identity.h"

#include <gtest/gtest.h>
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <string>

namespace libai {
namespace {

// What a forked child computes, written back through a pipe.
std::string identity_in_child(bool new_ipc_namespace) {
  int fds[2];
  EXPECT_EQ(::pipe(fds), 0);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    std::string key = "unshare failed";
    if (!new_ipc_namespace || ::unshare(CLONE_NEWIPC) == 0) key = host_identity();
    (void)!::write(fds[1], key.data(), key.size());
    ::_exit(0);
  }
  ::close(fds[1]);
  std::string out;
  char buf[256];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) out.append(buf, size_t(n));
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return out;
}

TEST(HostIdentity, NamesTheKernelAndNamespaces) {
  const std::string key = host_identity();
  ASSERT_FALSE(key.empty());
  EXPECT_EQ(key.rfind("boot ", 0), 0u) << key;
  EXPECT_NE(key.find(" ipc "), std::string::npos) << key;
  EXPECT_NE(key.find(" pid "), std::string::npos) << key;
}

TEST(HostIdentity, AForkedProcessSharesIt) { EXPECT_EQ(identity_in_child(false), host_identity()); }

// A process in an IPC namespace of its own cannot see our /dev/shm: its key differs. Making the
// namespace needs CAP_SYS_ADMIN (root here and in CI); without it the child says so, and the
// test then fails rather than pass vacuously.
TEST(HostIdentity, AnotherIpcNamespaceDiffers) {
  const std::string other = identity_in_child(true);
  ASSERT_NE(other, "unshare failed") << "this test needs CAP_SYS_ADMIN (unshare(CLONE_NEWIPC))";
  EXPECT_FALSE(other.empty());
  EXPECT_NE(other, host_identity());
}

}  // namespace
}  // namespace libai
