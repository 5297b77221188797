/* V8's perf map names (ember/jsname.h). */
#include <string.h>

#include "ember/jsname.h"

/* A 1-based decimal that fits 31 bits, the whole of [s, e). */
static bool number(const char *s, const char *e, uint32_t *out) {
  if (s == e || e - s > 10) return false;
  uint64_t v = 0;
  for (const char *c = s; c < e; c++) {
    if (*c < '0' || *c > '9') return false;
    v = v * 10 + (uint64_t)(*c - '0');
  }
  if (v == 0 || v > INT32_MAX) return false;
  *out = (uint32_t)v;
  return true;
}

bool ember_jsname_parse(const char *name, ember_jsname_t *out) {
  if (name == NULL || out == NULL) return false;
  /* The tag: letters, then ':'. */
  const char *p = name;
  while ((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z')) p++;
  if (p == name || *p != ':') return false;
  p++;
  if (*p == '*' || *p == '~' || *p == '^' || *p == '+') p++;
  /* From the right: ":COLUMN", ":LINE", and the script after the last
   * space before them (a function's name may hold spaces, a script's path
   * is taken not to). */
  size_t len = strlen(p);
  const char *end = p + len;
  const char *c2 = memrchr(p, ':', len);
  if (c2 == NULL) return false;
  const char *c1 = memrchr(p, ':', (size_t)(c2 - p));
  if (c1 == NULL) return false;
  uint32_t line, column;
  if (!number(c1 + 1, c2, &line) || !number(c2 + 1, end, &column)) return false;
  const char *sp = memrchr(p, ' ', (size_t)(c1 - p));
  if (sp == NULL || sp + 1 == c1) return false;
  *out = (ember_jsname_t){.function = p,
                          .function_len = (size_t)(sp - p),
                          .script = sp + 1,
                          .script_len = (size_t)(c1 - sp - 1),
                          .line = line,
                          .column = column};
  return true;
}

static int hex(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

bool ember_jsname_script_path(const char *script, size_t script_len, char *buf, size_t size) {
  if (script == NULL || buf == NULL || size == 0) return false;
  const char *s = script, *e = script + script_len;
  bool url = false;
  static const char file[] = "file://", local[] = "localhost";
  if (script_len >= sizeof file - 1 && memcmp(s, file, sizeof file - 1) == 0) {
    s += sizeof file - 1;
    if ((size_t)(e - s) >= sizeof local - 1 && memcmp(s, local, sizeof local - 1) == 0)
      s += sizeof local - 1;
    url = true;
  }
  if (s == e || *s != '/') return false;
  size_t n = 0;
  for (const char *c = s; c < e; c++) {
    char ch = *c;
    if (url && ch == '%') {
      int hi = c + 2 < e ? hex(c[1]) : -1, lo = c + 2 < e ? hex(c[2]) : -1;
      if (hi < 0 || lo < 0) return false;
      ch = (char)(hi * 16 + lo);
      c += 2;
    } else if (url && (ch == '?' || ch == '#')) {
      break;
    }
    if (ch == '\0' || n + 1 >= size) return false;
    buf[n++] = ch;
  }
  buf[n] = '\0';
  /* No ".." component: the path is looked up inside the process's root,
   * where it must name what the process named, not climb out of it. */
  for (const char *c = buf; (c = strstr(c, "..")) != NULL; c += 2)
    if (c[-1] == '/' && (c[2] == '/' || c[2] == '\0')) return false;
  return true;
}

/* Make an absolute path lexical: no ".", "..", or repeated '/' (no link
 * is ever followed, so this is where the open will land); ".." stops at
 * the root. In place. */
void ember_jsname_path_lexical(char *path) {
  char *w = path;
  for (const char *r = path; *r;) {
    while (*r == '/') r++;
    const char *e = strchr(r, '/');
    size_t n = e ? (size_t)(e - r) : strlen(r);
    if (n == 0) break;
    if (n == 1 && r[0] == '.') {
      /* nothing */
    } else if (n == 2 && r[0] == '.' && r[1] == '.') {
      while (w > path && *--w != '/') {
      }
    } else {
      *w++ = '/';
      memmove(w, r, n);
      w += n;
    }
    r += n;
  }
  if (w == path) *w++ = '/';
  *w = '\0';
}
