#include "normcheck/check/check.hpp"

#include "normcheck/check/scenario_check.hpp"
#include "normcheck/gate/gate_section.hpp"
#include "normcheck/io/files.hpp"
#include "normcheck/io/text.hpp"
#include "normcheck/recipes/recipe_section.hpp"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <optional>
#include <fcntl.h>
#include <sched.h>
#include <sys/stat.h>
#include <thread>
#include <system_error>
#include <unistd.h>

namespace normcheck {

namespace {

constexpr std::string_view no_gate_result =
    "no observed result to judge: --require-gate wants every file to carry what training code produced";
constexpr std::string_view no_gate_verdict =
    "the gate judged nothing: the document was rejected (as it expects) before its observed result could be "
    "judged, and --require-gate wants a verdict on what training code produced for every file, whatever it "
    "expects";

// Under --require-gate, a file passes only on the gate's own verdict: a rejection it expected is no verdict.
void require_gate_verdict(file_report& report, std::string_view why) {
  if (report.status != file_status::pass) return;
  report.failures.emplace_back(why);
  report.status = file_status::fail;
}

std::size_t index_of(strategy s) {
  return static_cast<std::size_t>(std::find(all_strategies.begin(), all_strategies.end(), s) - all_strategies.begin());
}

// Reads a normcheck/1 document, computes its gradients and judges its claims and sections.
file_report check_partition(std::string_view text, std::string source, const check_options& options) {
  file_report report;
  report.file = source;
  try {
    partition_file document =
        read_partition(text, std::move(source), options.limits, standard_sections(), options.jobs);
    report.gradients = compute_gradients(document.update);
    report.expected_error = document.expect_error;
    report.document = std::move(document);
  } catch (const error& e) {
    judge_rejection(report, e, text, options.limits);
    return report;
  }
  partition_file& document = *report.document;
  if (report.expected_error)
    report.failures.push_back("expected rejection with " + std::string(code_name(*report.expected_error)) +
                              ", but the document was read without error");
  for (const expectation& claim : document.expect) {
    expectation_result result{claim.name, claim.value, report.gradients[index_of(claim.name)], false};
    result.held = result.expected == result.actual;
    if (!result.held)
      report.failures.push_back("expect " + std::string(strategy_name(claim.name)) + " = " +
                                canonical_or_undefined(result.expected) + ", but it is " +
                                canonical_or_undefined(result.actual));
    report.expectations.push_back(std::move(result));
  }
  for (const std::shared_ptr<section>& part : document.sections)
    part->judge(document, report.gradients, report.failures);
  if (options.require_gate && !document.find_section<gate_section>()->present())
    report.failures.emplace_back(no_gate_result);
  report.status = report.failures.empty() ? file_status::pass : file_status::fail;
  return report;
}

}  // namespace

std::string_view status_name(file_status status) noexcept {
  switch (status) {
    case file_status::pass: return "pass";
    case file_status::fail: return "fail";
    case file_status::error: return "error";
  }
  return "error";
}

run_summary summarize(const std::vector<file_report>& reports) {
  run_summary summary;
  for (const file_report& r : reports) {
    switch (r.status) {
      case file_status::pass: ++summary.passed; break;
      case file_status::fail: ++summary.failed; break;
      case file_status::error: ++summary.errors; break;
    }
  }
  return summary;
}

const section_registry& standard_sections() {
  static const section_registry registry{
      [] { return std::make_unique<recipe_section>(); },
      [] { return std::make_unique<gate_section>(); },
  };
  return registry;
}

bool equals_objective(const gradient_set& gradients, strategy s) {
  const auto& objective = gradients[index_of(strategy::global_mean)];
  const auto& value = gradients[index_of(s)];
  return objective && value && *objective == *value;
}

void judge_rejection(file_report& report, const error& e, std::string_view text, const reader_limits& limits) {
  report.rejection = e;
  report.expected_error = text.empty() ? std::nullopt : find_expected_error(text, limits);
  if (report.expected_error && *report.expected_error == e.code() && !e.truncated()) {
    report.status = file_status::pass;
    return;
  }
  report.status = file_status::error;
  if (report.expected_error)
    report.failures.push_back("expected rejection with " + std::string(code_name(*report.expected_error)) +
                              ", but it was rejected with " + std::string(code_name(e.code())) +
                              (e.truncated() ? " (the document is cut off)" : ""));
}

namespace {

file_report check_by_kind(std::string_view text, std::string source, const check_options& options) {
  const document_kind kind = identify(text, options.limits);
  if (kind == document_kind::scenario) {
    file_report report = check_scenario(text, std::move(source), options);
    if (options.require_gate && !report.rejection) {
      report.failures.emplace_back(no_gate_result);
      report.status = file_status::fail;
    }
    return report;
  }
  if (kind == document_kind::trace) {
    file_report report;
    report.file = source;
    report.kind = kind;
    judge_rejection(report, wrong_kind(kind, "check", source), text, options.limits);
    return report;
  }
  return check_partition(text, std::move(source), options);
}

}  // namespace

file_report check_text(std::string_view text, std::string source, const check_options& options) {
  file_report report = check_by_kind(text, std::move(source), options);
  if (options.require_gate && report.rejection) require_gate_verdict(report, no_gate_verdict);
  return report;
}

file_report check_path(const std::filesystem::path& path, const check_options& options) {
  const std::string name = path == "-" ? std::string(standard_input_name) : path.string();
  auto rejected = [&](const error& e) {
    file_report report;
    report.file = name;
    judge_rejection(report, e, {}, options.limits);
    return report;
  };
  input_text input;
  try {
    input = open_input(path, options.limits);
  } catch (const error& e) {
    return rejected(e);
  }
  file_report report = check_text(input.view(), name, options);
  try {
    input.require_unchanged();  // a file rewritten while it was checked has no verdict
  } catch (const error& e) {
    return rejected(e);
  }
  return report;
}

std::vector<file_report> check_paths(const std::vector<std::filesystem::path>& inputs, const check_options& options,
                                     unsigned jobs, const std::function<void(const file_report&)>& each) {
  std::vector<file_report> reports;
  reports.reserve(inputs.size());
  const std::size_t workers = std::min<std::size_t>(std::max(jobs, 1u), inputs.size());
  if (workers <= 1) {
    check_options alone = options;
    alone.jobs = std::max(jobs, 1u);  // one file at a time: its own reading may use the threads
    for (const std::filesystem::path& input : inputs) {
      reports.push_back(check_path(input, alone));
      each(reports.back());
    }
    return reports;
  }
  // Workers take the next file in order, each read on its worker alone; this thread hands the reports on
  // in order as they complete.
  check_options one_thread_each = options;
  one_thread_each.jobs = 1;
  std::vector<std::optional<file_report>> done(inputs.size());
  std::vector<std::exception_ptr> failures(inputs.size());
  std::atomic<std::size_t> next{0};
  std::mutex guard;
  std::condition_variable finished;
  auto work = [&] {
    for (std::size_t i = next++; i < inputs.size(); i = next++) {
      std::optional<file_report> report;
      std::exception_ptr failure;
      try {
        report = check_path(inputs[i], one_thread_each);
      } catch (...) {  // not a normcheck error (those are reports): handed to the calling thread
        failure = std::current_exception();
      }
      const std::lock_guard<std::mutex> lock(guard);
      done[i] = std::move(report);
      failures[i] = failure;
      finished.notify_all();
    }
  };
  std::vector<std::jthread> threads;
  for (std::size_t t = 0; t < workers; ++t) threads.emplace_back(work);
  // However this thread leaves (a report delivered, an exception from `each` or a worker), the workers
  // take no further file; the threads are joined after this guard.
  struct stop_taking {
    std::atomic<std::size_t>& next;
    std::size_t end;
    ~stop_taking() { next = end; }
  } stop{next, inputs.size()};
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    std::unique_lock<std::mutex> lock(guard);
    finished.wait(lock, [&] { return done[i].has_value() || failures[i]; });
    if (failures[i]) std::rethrow_exception(failures[i]);
    reports.push_back(std::move(*done[i]));
    done[i].reset();
    lock.unlock();
    each(reports.back());
  }
  return reports;
}

unsigned available_cores() {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (::sched_getaffinity(0, sizeof allowed, &allowed) == 0 && CPU_COUNT(&allowed) > 0)
    return static_cast<unsigned>(CPU_COUNT(&allowed));
  return std::max(1u, std::thread::hardware_concurrency());
}

bool is_report_document(const std::filesystem::path& path) {
  // The format is the first member of every report normcheck writes: the head of the file tells.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) return false;
  struct stat info {};
  std::string head(4096, '\0');
  ssize_t n = -1;
  if (::fstat(fd, &info) == 0 && S_ISREG(info.st_mode)) {
    do n = ::read(fd, head.data(), head.size());
    while (n < 0 && errno == EINTR);
  }
  ::close(fd);
  if (n <= 0) return false;
  head.resize(static_cast<std::size_t>(n));
  const std::optional<std::string> format = declared_format(head);
  return format && format->rfind(report_format_family, 0) == 0;
}

std::vector<std::filesystem::path> collect_inputs(const std::vector<std::filesystem::path>& paths,
                                                  std::vector<std::filesystem::path>* skipped_reports) {
  namespace fs = std::filesystem;
  std::vector<fs::path> inputs;
  for (const fs::path& path : paths) {
    std::error_code ec;
    if (!fs::is_directory(path, ec)) {
      inputs.push_back(path);
      continue;
    }
    std::vector<fs::path> found;
    fs::recursive_directory_iterator it(path, fs::directory_options::skip_permission_denied, ec), end;
    for (; !ec && it != end; it.increment(ec)) {
      std::error_code type_ec;
      const bool directory = it->is_directory(type_ec);
      if (it->path().extension() == ".json" && !directory) {
        // A report of an earlier run in the folder is output, not input: set aside, and the caller says so.
        if (skipped_reports && is_report_document(it->path())) skipped_reports->push_back(it->path());
        else found.push_back(it->path());
      }
      // A subdirectory the walk cannot enter is kept, so that its check reports it instead of its
      // files silently missing from the run.
      else if (directory && !it->is_symlink(type_ec) && ::access(it->path().c_str(), R_OK | X_OK) != 0)
        found.push_back(it->path());
    }
    if (ec) found.push_back(path);  // reported by its check
    std::sort(found.begin(), found.end());
    inputs.insert(inputs.end(), found.begin(), found.end());
  }
  return inputs;
}

}  // namespace normcheck
