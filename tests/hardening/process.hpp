#pragma once
// Runs the real executable in a child process with a time limit, and measures it: exit status or
// signal, output, peak resident memory (wait4) and elapsed time. Also what several tests of the folder
// share: the executable's path, a case it passes, the bound on its peak memory, `normcheck check` itself.

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <malloc.h>
#include <sstream>
#include <string>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

namespace hardening {

/// Where the child's standard output goes.
enum class output_to {
  file,         ///< a temporary file, read back into `out`
  closed_pipe,  ///< a pipe whose reading end is already closed (as after `| head -n 1` exits)
};

/// What a child process did.
struct process_result {
  int status = -1;          ///< exit status, or -1 when killed by a signal
  int signal = 0;           ///< the signal that ended it, or 0
  bool timed_out = false;   ///< killed because it ran past the time limit
  std::string out;
  std::string err;
  long peak_kib = 0;        ///< peak resident set size in KiB
  double seconds = 0;
};

inline std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

/// Sets this process's peak resident set back to its present size, the freed heap given back first (Linux:
/// malloc_trim, then clear_refs 5; elsewhere nothing). posix_spawn starts the child in the parent's memory
/// (as vfork does), and at the child's exec the kernel carries the parent's peak over into the child's: a
/// test that once held a large document would measure its own peak instead of the executable's (Python's
/// os.posix_spawn shows it: a child of a process that touched 300 MB reports a peak of 320 MB for /bin/true,
/// 13 MB after the reset).
inline void reset_peak_resident_set() {
#ifdef __GLIBC__
  ::malloc_trim(0);
#endif
  std::ofstream("/proc/self/clear_refs") << "5";
}

/// Runs `args` (args[0] is the executable's path) with the time limit `timeout_seconds`.
inline process_result run_process(const std::vector<std::string>& args, output_to stdout_to = output_to::file,
                                  double timeout_seconds = 30) {
  char out_path[] = "/tmp/normcheck-out-XXXXXX";
  char err_path[] = "/tmp/normcheck-err-XXXXXX";
  const int out_fd = ::mkstemp(out_path);
  const int err_fd = ::mkstemp(err_path);
  int pipe_fds[2] = {-1, -1};
  if (stdout_to == output_to::closed_pipe) {
    if (::pipe(pipe_fds) != 0) return {};
    ::close(pipe_fds[0]);
  }
  // posix_spawn, not fork: a forked child's peak resident set starts at its parent's (the test process's
  // pages count until exec), which would hide the executable's own peak under the test's.
  posix_spawn_file_actions_t actions;
  ::posix_spawn_file_actions_init(&actions);
  ::posix_spawn_file_actions_adddup2(&actions, stdout_to == output_to::closed_pipe ? pipe_fds[1] : out_fd, 1);
  ::posix_spawn_file_actions_adddup2(&actions, err_fd, 2);
  ::posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawnattr_t attributes;
  ::posix_spawnattr_init(&attributes);
  sigset_t defaults;
  ::sigemptyset(&defaults);
  ::sigaddset(&defaults, SIGPIPE);  // as a shell would start it
  ::posix_spawnattr_setsigdefault(&attributes, &defaults);
  ::posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETSIGDEF);
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  reset_peak_resident_set();
  const auto start = std::chrono::steady_clock::now();
  pid_t child = -1;
  const int spawned = ::posix_spawn(&child, argv[0], &actions, &attributes, argv.data(), environ);
  ::posix_spawn_file_actions_destroy(&actions);
  ::posix_spawnattr_destroy(&attributes);
  if (spawned != 0) {
    process_result failed;
    failed.status = 127;
    failed.err = "cannot start " + args[0];
    return failed;
  }
  if (pipe_fds[1] >= 0) ::close(pipe_fds[1]);
  process_result result;
  int wait_status = 0;
  struct rusage usage {};
  while (true) {
    const pid_t done = ::wait4(child, &wait_status, WNOHANG, &usage);
    if (done == child) break;
    const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
    if (elapsed.count() > timeout_seconds && !result.timed_out) {
      result.timed_out = true;
      ::kill(child, SIGKILL);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  result.peak_kib = usage.ru_maxrss;
  if (WIFEXITED(wait_status)) result.status = WEXITSTATUS(wait_status);
  if (WIFSIGNALED(wait_status)) result.signal = WTERMSIG(wait_status);
  ::close(out_fd);
  ::close(err_fd);
  result.out = slurp(out_path);
  result.err = slurp(err_path);
  ::unlink(out_path);
  ::unlink(err_path);
  return result;
}

/// A fresh empty directory under /tmp, removed by the destructor.
struct temporary_directory {
  std::string path;
  temporary_directory() {
    char name[] = "/tmp/normcheck-hardening-XXXXXX";
    path = ::mkdtemp(name);
    ::chmod(path.c_str(), 0755);
  }
  ~temporary_directory() {
    std::error_code ignored;
    std::filesystem::remove_all(path, ignored);
  }
  std::string operator/(const std::string& name) const { return path + "/" + name; }
};

/// Writes `content` to `path`.
inline void write_text(const std::string& path, const std::string& content) {
  std::ofstream out(path, std::ios::binary);
  out << content;
}

/// The executable under test, and a bundled case it passes (tests/hardening/CMakeLists.txt defines the paths).
inline const std::string normcheck_executable = NORMCHECK_EXECUTABLE;
inline const std::string good_case = std::string(NORMCHECK_CASES_DIR) + "/reference/01_global_mean.json";

// Sanitizers multiply memory (shadow memory, quarantine): the bound applies to the normal build.
#ifdef NORMCHECK_SANITIZED
constexpr long peak_bound_kib = 1024 * 1024;
#else
constexpr long peak_bound_kib = 64 * 1024;
#endif

/// Runs `normcheck check args`.
inline process_result check(const std::vector<std::string>& args, output_to stdout_to = output_to::file) {
  std::vector<std::string> command{normcheck_executable, "check"};
  command.insert(command.end(), args.begin(), args.end());
  return run_process(command, stdout_to);
}

}  // namespace hardening
