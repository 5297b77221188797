/* The folded (collapsed) stack format of FlameGraph and inferno:
 *
 *   root;caller;leaf VALUE\n
 *
 * one line per distinct displayed stack, sorted by stack text so the output
 * of a profile is always the same bytes. */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "ember/export.h"
#include "export.h"

typedef struct folded_line {
  const char *text; /* "root;...;leaf", NUL-terminated, in the scratch buffer */
  int64_t value;
} folded_line_t;

static int line_cmp(const void *a, const void *b) {
  const folded_line_t *x = a, *y = b;
  return strcmp(x->text, y->text);
}

/* ';' separates frames and a newline ends the line: a name holding either
 * would change the stack a reader sees, so they become ':' and ' '. */
static void escape_name(char *s) {
  for (; *s != '\0'; s++) {
    if (*s == ';') {
      *s = ':';
    } else if (*s == '\n' || *s == '\r') {
      *s = ' ';
    }
  }
}

int ember_export_folded(const ember_profile_t *p, size_t vi, ember_buf_t *out) {
  if (p == NULL || out == NULL || vi >= ember_profile_ntypes(p)) return -EINVAL;
  int rc = 0;
  size_t start = out->len;
  size_t nstacks = ember_profile_nstacks(p);
  ember__names_t names = {NULL, NULL, 0};
  ember_buf_t text;
  size_t *offs = NULL;
  folded_line_t *lines = NULL;
  size_t nlines = 0;
  ember_buf_init(&text, SIZE_MAX - 1);

  rc = ember__names_build(p, &names);
  if (rc != 0) goto cleanup;
  for (size_t i = 0; i < names.n; i++) escape_name(names.name[i]);

  offs = ember_malloc(nstacks * sizeof *offs);
  lines = ember_malloc(nstacks * sizeof *lines);
  if (offs == NULL || lines == NULL) {
    rc = -ENOMEM;
    goto cleanup;
  }
  /* Texts go back to back into one scratch buffer; the line array points
   * into it only once it has stopped moving. */
  for (size_t s = 0; s < nstacks; s++) {
    const uint32_t *ids;
    const int64_t *values;
    size_t depth;
    rc = ember_profile_stack(p, (uint32_t)s, &ids, &depth, &values);
    if (rc != 0) goto cleanup;
    if (values[vi] == 0) continue;
    offs[nlines] = text.len;
    lines[nlines].value = values[vi];
    nlines++;
    /* The profile stores stacks leaf first; folded lines are root first. */
    for (size_t d = depth; d-- > 0;) {
      rc = ember_buf_puts(&text, names.name[ids[d]]);
      /* A ';' after each frame but the leaf, whose text ends with a NUL. */
      if (rc == 0) rc = ember_buf_append(&text, d > 0 ? ";" : "", 1);
      if (rc != 0) goto cleanup;
    }
  }
  for (size_t i = 0; i < nlines; i++) lines[i].text = text.data + offs[i];
  qsort(lines, nlines, sizeof *lines, line_cmp);

  for (size_t i = 0; i < nlines;) {
    /* Frames that differ only in what the name leaves out (address, line)
     * make equal texts; readers would add them up, so add them here. */
    int64_t value = lines[i].value;
    size_t j = i + 1;
    while (j < nlines && strcmp(lines[j].text, lines[i].text) == 0) {
      value = ember__sat_add(value, lines[j].value);
      j++;
    }
    rc = ember_buf_puts(out, lines[i].text);
    if (rc == 0) rc = ember_buf_printf(out, " %" PRId64 "\n", value);
    if (rc != 0) goto cleanup;
    i = j;
  }

cleanup:
  if (rc != 0) ember__buf_truncate(out, start);
  ember_free(lines);
  ember_free(offs);
  ember_buf_free(&text);
  ember__names_free(&names);
  return rc;
}
