/* Per-CPU perf_event sampler. See sampler.h and docs/internals/sampler.md. */
#include <errno.h>
#include <fcntl.h>
#include <linux/perf_event.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include "ember/log.h"
#include "ember/parse.h"
#include "procfs.h"
#include "sampler.h"

#define MAX_CPUS 1024

typedef struct cpu_ring {
  ember__sampler_t *owner;
  uint32_t cpu;
  int fd;
  ember__perf_ring_t ring;
  uv_poll_t poll;
  bool polling;
} cpu_ring_t;

struct ember__sampler {
  uv_loop_t *loop;
  ember__sampler_opts_t opts;
  ember__sample_fn fn;
  void *ctx;
  size_t page_size;
  cpu_ring_t *rings[MAX_CPUS];
  uv_timer_t drain_timer, hotplug_timer;
  int timers_closed;
  ember__sampler_stats_t stats; /* wakeups and cpus; the rest in counts */
  ember__perf_format_t fmt;     /* what open_ring asks for */
  ember__perf_counts_t counts;
  /* A record that wraps the ring's end is copied here to be read whole. */
  uint64_t scratch[EMBER__PERF_SCRATCH / 8];
  uint64_t ips[EMBER__PERF_MAX_CHAIN];
};

int ember__cpulist_parse(const char *s, uint8_t *bitmap, size_t max) {
  memset(bitmap, 0, (max + 7) / 8);
  int count = 0;
  const char *p = s;
  while (*p != '\0' && *p != '\n') {
    char num[16];
    size_t n = 0;
    uint64_t a, b;
    while (p[n] >= '0' && p[n] <= '9' && n < sizeof num - 1) n++;
    if (n == 0) return -EINVAL;
    memcpy(num, p, n);
    num[n] = '\0';
    if (ember_parse_u64(num, 0, max - 1, &a) != 0) return -EINVAL;
    p += n;
    b = a;
    if (*p == '-') {
      p++;
      n = 0;
      while (p[n] >= '0' && p[n] <= '9' && n < sizeof num - 1) n++;
      if (n == 0) return -EINVAL;
      memcpy(num, p, n);
      num[n] = '\0';
      if (ember_parse_u64(num, a, max - 1, &b) != 0) return -EINVAL;
      p += n;
    }
    for (uint64_t c = a; c <= b; c++) {
      if (!(bitmap[c / 8] & (1u << (c % 8)))) count++;
      bitmap[c / 8] |= (uint8_t)(1u << (c % 8));
    }
    if (*p == ',')
      p++;
    else if (*p != '\0' && *p != '\n')
      return -EINVAL;
  }
  return count;
}

static int online_cpus(const ember__sampler_t *s, uint8_t *bitmap) {
  char buf[4096];
  const char *path = s->opts.sysfs_online ? s->opts.sysfs_online : "/sys/devices/system/cpu/online";
  int rc = ember__proc_read_str(path, buf, sizeof buf);
  if (rc != 0) return rc;
  return ember__cpulist_parse(buf, bitmap, MAX_CPUS);
}

/* --- ring reading --- */

/* The layout open_ring asks for. */
#define SAMPLE_TYPE                                                                                \
  (PERF_SAMPLE_IP | PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_CPU | PERF_SAMPLE_PERIOD |    \
   PERF_SAMPLE_CALLCHAIN)

static void drain_ring(cpu_ring_t *r) {
  ember__sampler_t *s = r->owner;
  ember__perf_reader_t rd = {s->fmt, s->fn, s->ctx, &s->counts, s->scratch, s->ips};
  ember__perf_ring_drain(&rd, &r->ring);
}

static void on_poll(uv_poll_t *h, int status, int events) {
  cpu_ring_t *r = h->data;
  (void)events;
  if (status < 0) return;
  r->owner->stats.wakeups++;
  drain_ring(r);
}

void ember__sampler_drain(ember__sampler_t *s) {
  for (size_t c = 0; c < MAX_CPUS; c++) {
    if (s->rings[c] != NULL) drain_ring(s->rings[c]);
  }
}

static void on_drain_timer(uv_timer_t *t) { ember__sampler_drain(t->data); }

/* --- opening and closing CPUs --- */

static void on_ring_closed(uv_handle_t *h) {
  cpu_ring_t *r = h->data;
  ember_free(r);
}

static void close_ring(ember__sampler_t *s, uint32_t cpu) {
  cpu_ring_t *r = s->rings[cpu];
  if (r == NULL) return;
  s->rings[cpu] = NULL;
  s->stats.cpus--;
  ioctl(r->fd, PERF_EVENT_IOC_DISABLE, 0);
  drain_ring(r);
  ember__perf_ring_unmap(&r->ring);
  close(r->fd);
  if (r->polling) {
    uv_poll_stop(&r->poll);
    uv_close((uv_handle_t *)&r->poll, on_ring_closed);
  } else {
    ember_free(r);
  }
}

static int open_ring(ember__sampler_t *s, uint32_t cpu, char *errbuf, size_t errbuf_size) {
  size_t data_size = s->opts.ring_pages * s->page_size;
  struct perf_event_attr a = {
      .type = PERF_TYPE_SOFTWARE,
      .config = PERF_COUNT_SW_CPU_CLOCK,
      .sample_freq = s->opts.hz,
      .freq = 1,
      .sample_type = SAMPLE_TYPE,
      .disabled = 1,
      .exclude_callchain_kernel = s->opts.kernel ? 0 : 1,
      .watermark = 1,
      .wakeup_watermark = (uint32_t)(data_size / 4),
      .use_clockid = 1,
      .clockid = CLOCK_MONOTONIC,
  };
  ember__perf_want_stack(&a, s->opts.stack_bytes);
  s->fmt = (ember__perf_format_t){a.sample_type, a.sample_regs_user};
  int fd = ember__perf_open(&a, -1, (int)cpu, -1, 0);
  if (fd < 0) {
    int e = -fd;
    if (e == ENODEV || e == ENOENT) return 0; /* went offline meanwhile */
    if (e == EACCES || e == EPERM) {
      snprintf(errbuf, errbuf_size,
               "perf_event_open refused (%s): system-wide sampling needs root or CAP_PERFMON "
               "(kernel.perf_event_paranoid is %ld)",
               strerror(e), ember__read_sysctl("/proc/sys/kernel/perf_event_paranoid"));
    } else if (e == EINVAL && s->opts.hz > 0) {
      snprintf(errbuf, errbuf_size,
               "perf_event_open(cpu %u, %u Hz) failed: %s (kernel.perf_event_max_sample_rate is "
               "%ld)",
               cpu, s->opts.hz, strerror(e),
               ember__read_sysctl("/proc/sys/kernel/perf_event_max_sample_rate"));
    } else {
      snprintf(errbuf, errbuf_size, "perf_event_open(cpu %u) failed: %s", cpu, strerror(e));
    }
    return -e;
  }
  ember__perf_ring_t ring;
  int mrc = ember__perf_ring_map(&ring, fd, s->opts.ring_pages);
  if (mrc != 0) {
    close(fd);
    snprintf(errbuf, errbuf_size, "mmap of the perf ring for cpu %u failed: %s", cpu,
             strerror(-mrc));
    return mrc;
  }
  cpu_ring_t *r = ember_calloc(1, sizeof *r);
  if (r == NULL) {
    ember__perf_ring_unmap(&ring);
    close(fd);
    return -ENOMEM;
  }
  *r = (cpu_ring_t){.owner = s, .cpu = cpu, .fd = fd, .ring = ring};
  if (uv_poll_init(s->loop, &r->poll, fd) == 0) {
    r->poll.data = r;
    r->polling = uv_poll_start(&r->poll, UV_READABLE, on_poll) == 0;
    if (!r->polling) uv_close((uv_handle_t *)&r->poll, NULL);
  }
  s->rings[cpu] = r;
  s->stats.cpus++;
  ioctl(fd, PERF_EVENT_IOC_ENABLE, 0);
  return 0;
}

static void on_hotplug_timer(uv_timer_t *t) {
  ember__sampler_t *s = t->data;
  uint8_t online[MAX_CPUS / 8];
  if (online_cpus(s, online) < 0) return;
  for (uint32_t c = 0; c < MAX_CPUS; c++) {
    bool on = online[c / 8] & (1u << (c % 8));
    if (on && s->rings[c] == NULL) {
      char err[256];
      if (open_ring(s, c, err, sizeof err) == 0 && s->rings[c] != NULL)
        EMBER_INFO("sampler", "cpu %u came online: sampling it", c);
      else if (s->rings[c] == NULL)
        EMBER_WARN("sampler", "cpu %u came online but cannot be sampled: %s", c, err);
    } else if (!on && s->rings[c] != NULL) {
      EMBER_INFO("sampler", "cpu %u went offline", c);
      close_ring(s, c);
    }
  }
}

int ember__sampler_start(uv_loop_t *loop, const ember__sampler_opts_t *opts, ember__sample_fn fn,
                         void *ctx, ember__sampler_t **out, char *errbuf, size_t errbuf_size) {
  if (loop == NULL || opts == NULL || fn == NULL || out == NULL) return -EINVAL;
  ember__sampler_opts_t o = *opts;
  if (o.hz == 0) o.hz = 19;
  if (o.stack_bytes > EMBER__PERF_STACK_MAX) {
    snprintf(errbuf, errbuf_size, "a user stack copy is at most %u bytes, got %u",
             EMBER__PERF_STACK_MAX, o.stack_bytes);
    return -EINVAL;
  }
  if (o.ring_pages == 0)
    o.ring_pages = o.stack_bytes ? ember__perf_ring_pages_for(o.hz, o.stack_bytes,
                                                              (size_t)sysconf(_SC_PAGESIZE), 8)
                                 : 8;
  if (o.drain_ms == 0) o.drain_ms = 250;
  if ((o.ring_pages & (o.ring_pages - 1)) != 0 || o.ring_pages > 4096) {
    snprintf(errbuf, errbuf_size, "ring_pages must be a power of two up to 4096, got %u",
             o.ring_pages);
    return -EINVAL;
  }
  long max_rate = ember__read_sysctl("/proc/sys/kernel/perf_event_max_sample_rate");
  if (max_rate > 0 && o.hz > (uint32_t)max_rate) {
    snprintf(errbuf, errbuf_size,
             "%u Hz is above kernel.perf_event_max_sample_rate (%ld); lower the rate or raise the "
             "sysctl",
             o.hz, max_rate);
    return -EINVAL;
  }
  ember__sampler_t *s = ember_calloc(1, sizeof *s);
  if (s == NULL) return -ENOMEM;
  s->loop = loop;
  s->opts = o;
  s->fn = fn;
  s->ctx = ctx;
  s->page_size = (size_t)sysconf(_SC_PAGESIZE);
  uint8_t online[MAX_CPUS / 8];
  int n = online_cpus(s, online);
  if (n <= 0) {
    snprintf(errbuf, errbuf_size, "cannot read the online CPU list: %s",
             n < 0 ? strerror(-n) : "empty");
    ember_free(s);
    return n < 0 ? n : -ENODEV;
  }
  int rc = 0;
  for (uint32_t c = 0; c < MAX_CPUS && rc == 0; c++) {
    if (online[c / 8] & (1u << (c % 8))) rc = open_ring(s, c, errbuf, errbuf_size);
  }
  if (rc != 0) {
    for (uint32_t c = 0; c < MAX_CPUS; c++) close_ring(s, c);
    /* Rings with poll handles are freed by their close callbacks; keep the
     * sampler alive until the loop runs them: a tiny leak on this error
     * path would be worse than a dangling pointer, so run them now. */
    uv_run(loop, UV_RUN_NOWAIT);
    ember_free(s);
    return rc;
  }
  uv_timer_init(loop, &s->drain_timer);
  s->drain_timer.data = s;
  uv_timer_start(&s->drain_timer, on_drain_timer, o.drain_ms, o.drain_ms);
  uv_timer_init(loop, &s->hotplug_timer);
  s->hotplug_timer.data = s;
  if (o.hotplug_ms > 0)
    uv_timer_start(&s->hotplug_timer, on_hotplug_timer, o.hotplug_ms, o.hotplug_ms);
  EMBER_INFO("sampler", "sampling %u CPUs at %u Hz (cpu-clock, %s, %s callchains, %u-page rings)",
             s->stats.cpus, o.hz, o.stack_bytes ? "user stacks copied" : "frame pointers",
             o.kernel ? "user+kernel" : "user", o.ring_pages);
  *out = s;
  return 0;
}

static void on_timer_closed(uv_handle_t *h) {
  ember__sampler_t *s = h->data;
  /* libuv runs close callbacks in no promised order: free after both. */
  if (++s->timers_closed == 2) ember_free(s);
}

void ember__sampler_stop(ember__sampler_t *s) {
  if (s == NULL) return;
  for (uint32_t c = 0; c < MAX_CPUS; c++) close_ring(s, c);
  uv_timer_stop(&s->drain_timer);
  uv_timer_stop(&s->hotplug_timer);
  uv_close((uv_handle_t *)&s->drain_timer, on_timer_closed);
  uv_close((uv_handle_t *)&s->hotplug_timer, on_timer_closed);
}

void ember__sampler_stats(const ember__sampler_t *s, ember__sampler_stats_t *out) {
  *out = s->stats;
  out->samples = s->counts.samples;
  out->lost = s->counts.lost;
  out->throttles = s->counts.throttles;
  out->unthrottles = s->counts.unthrottles;
  out->bad_records = s->counts.bad_records;
}
