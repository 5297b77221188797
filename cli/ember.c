/* ember: the command-line front end.
 *
 *   ember up [--data DIR] [--config FILE] [key=value ...]
 *                                              profile this machine
 *   ember workers | versions | hosts | actors  what the server has seen
 *   ember query --worker W ...                 a merged profile (query.c)
 *   ember diff --worker W ... --vs-...         what changed from A to B
 *   ember profile --worker W ...               profile now, on demand (profile.c)
 *   ember sessions                             the server's on-demand sessions
 *   ember alerts [show ID]                     the server's alerts (alerts.c)
 *   ember rules [list | add ... | delete NAME] its alert rules (rules.c)
 *   ember sourcemaps [list | upload | delete]  its uploaded source maps
 *                                              (sourcemaps.c)
 *   ember decode [--format F] [-o OUT] [FILE]  read one wire message (e.g. a
 *                                              Kafka value saved by kcat),
 *                                              validate it and export it
 *   ember version
 *
 * The query commands are thin clients of the HTTP API (docs/api.md) that
 * `ember up` and ember-collector serve. Exit statuses are in cli.h. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/stat.h>
#include <time.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "ember/buf.h"
#include "ember/codec.h"
#include "ember/config.h"
#include "ember/export.h"
#include "ember/kafka.h"
#include "ember/log.h"
#include "cli.h"
#include "common.h"

static void usage(FILE *f) {
  fputs("usage: ember up [--data DIR] [--config FILE] [key=value ...]\n", f);
  fputs(ember__usage_query, f);
  fputs(ember__usage_profile, f);
  fputs(ember__usage_alerts, f);
  fputs(ember__usage_rules, f);
  fputs(ember__usage_sourcemaps, f);
  fputs("       ember decode [--format pprof|folded|speedscope|tree|top] [-o OUT] [FILE]\n"
        "       ember version\n"
        "\n",
        f);
  fputs(ember__usage_query_notes, f);
  fputs(ember__usage_profile_notes, f);
  fputs(ember__usage_alerts_notes, f);
  fputs(ember__usage_rules_notes, f);
  fputs(ember__usage_sourcemaps_notes, f);
  fputs("\n"
        "exit status: 0 ok; 1 the server, the network or a file failed, or a session\n"
        "failed or expired; 2 bad arguments (here, or as the server judged them: HTTP\n"
        "400/401/413, or 404 for a session's unknown worker/actor; a refused, unknown\n"
        "or read-only rule, an unknown alert); 3 the query, session, alerts or rules\n"
        "matched nothing (the empty result is still written); 130 Ctrl-C\n"
        "cancelled a session.\n",
        f);
}

static int write_all(const char *path, const char *data, size_t len) {
  int fd = path ? open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644) : STDOUT_FILENO;
  if (fd < 0) return -errno;
  int rc = 0;
  while (len > 0) {
    ssize_t n = write(fd, data, len);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      rc = -errno;
      break;
    }
    data += n;
    len -= (size_t)n;
  }
  if (path && close(fd) != 0 && rc == 0) rc = -errno;
  return rc;
}

static int print_top(const ember_profile_t *p, ember_buf_t *out) {
  int vi = ember_profile_type_index(p, EMBER_VT_CPU_NS);
  if (vi < 0) vi = 0;
  ember_top_entry_t *top = NULL;
  size_t n = 0;
  int rc = ember_profile_top(p, (size_t)vi, EMBER_TOP_BY_SELF, 20, &top, &n);
  if (rc != 0) return rc;
  int64_t total = ember_profile_total(p, (size_t)vi);
  ember_buf_printf(out, "%12s %6s %12s %6s  %s\n", "self", "self%", "total", "total%", "function");
  for (size_t i = 0; i < n && rc == 0; i++) {
    double s = total ? 100.0 * (double)top[i].self / (double)total : 0.0;
    double t = total ? 100.0 * (double)top[i].total / (double)total : 0.0;
    rc = ember_buf_printf(out, "%12lld %5.1f%% %12lld %5.1f%%  %s\n", (long long)top[i].self, s,
                          (long long)top[i].total, t, top[i].name);
  }
  ember_top_free(top, n);
  return rc;
}

static int cmd_decode(int argc, char **argv) {
  const char *in = NULL, *out = NULL, *fmt_name = "folded";
  for (int i = 0; i < argc; i++) {
    if ((strcmp(argv[i], "--format") == 0 || strcmp(argv[i], "-f") == 0) && i + 1 < argc) {
      fmt_name = argv[++i];
    } else if (strcmp(argv[i], "-o") == 0 && i + 1 < argc) {
      out = argv[++i];
    } else if (argv[i][0] == '-' && argv[i][1] != '\0') {
      fprintf(stderr, "ember decode: unknown option '%s'\n", argv[i]);
      usage(stderr);
      return EXIT_USAGE;
    } else {
      in = argv[i];
    }
  }
  ember_format_t fmt = EMBER_FORMAT_FOLDED;
  bool top = strcmp(fmt_name, "top") == 0;
  if (!top && ember_format_parse(fmt_name, &fmt) != 0) {
    fprintf(stderr, "ember decode: unknown format '%s' (pprof, folded, speedscope, tree, top)\n",
            fmt_name);
    return EXIT_USAGE;
  }
  ember_codec_limits_t lim;
  ember_codec_limits_default(&lim);
  ember_buf_t raw, res;
  ember_buf_init(&raw, lim.max_message + 1);
  ember_buf_init(&res, (size_t)1 << 30);
  ember_profile_t *p = NULL;
  char err[256] = "";
  int status = EXIT_FAILED;
  int rc = ember__read_input(in, &raw, NULL);
  if (rc != 0) {
    fprintf(stderr, "ember decode: cannot read %s: %s\n", in ? in : "stdin", ember_strerror(rc));
    goto cleanup;
  }
  rc = ember_codec_decode(raw.data, raw.len, &lim, &p, err, sizeof err);
  if (rc != 0) {
    fprintf(stderr, "ember decode: %s: %s\n", in ? in : "stdin", err);
    goto cleanup;
  }
  rc = top ? print_top(p, &res) : ember_export(p, fmt, 0, &res);
  if (rc == 0) rc = write_all(out, res.data ? res.data : "", res.len);
  if (rc != 0) {
    fprintf(stderr, "ember decode: cannot write %s: %s\n", out ? out : "stdout",
            ember_strerror(rc));
    goto cleanup;
  }
  status = 0;
cleanup:
  ember_profile_free(p);
  ember_buf_free(&raw);
  ember_buf_free(&res);
  return status;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    usage(stderr);
    return EXIT_USAGE;
  }
  if (strcmp(argv[1], "up") == 0) return ember__cmd_up(argc - 2, argv + 2);
  if (strcmp(argv[1], "decode") == 0) return cmd_decode(argc - 2, argv + 2);
  if (strcmp(argv[1], "workers") == 0) return ember__cmd_workers(argc - 2, argv + 2);
  if (strcmp(argv[1], "query") == 0) return ember__cmd_query(argc - 2, argv + 2);
  if (strcmp(argv[1], "diff") == 0) return ember__cmd_diff(argc - 2, argv + 2);
  if (strcmp(argv[1], "profile") == 0) return ember__cmd_profile(argc - 2, argv + 2);
  if (strcmp(argv[1], "sessions") == 0) return ember__cmd_sessions(argc - 2, argv + 2);
  if (strcmp(argv[1], "alerts") == 0) return ember__cmd_alerts(argc - 2, argv + 2);
  if (strcmp(argv[1], "rules") == 0) return ember__cmd_rules(argc - 2, argv + 2);
  if (strcmp(argv[1], "sourcemaps") == 0) return ember__cmd_sourcemaps(argc - 2, argv + 2);
  if (strcmp(argv[1], "versions") == 0 || strcmp(argv[1], "hosts") == 0 ||
      strcmp(argv[1], "actors") == 0)
    return ember__cmd_labels(argv[1], argc - 2, argv + 2);
  if (strcmp(argv[1], "version") == 0 || strcmp(argv[1], "--version") == 0) {
    printf("ember %s\n", EMBER_VERSION_STRING);
    return 0;
  }
  if (strcmp(argv[1], "help") == 0 || strcmp(argv[1], "--help") == 0 ||
      strcmp(argv[1], "-h") == 0) {
    usage(stdout);
    return 0;
  }
  fprintf(stderr, "ember: unknown command '%s'\n", argv[1]);
  usage(stderr);
  return EXIT_USAGE;
}
