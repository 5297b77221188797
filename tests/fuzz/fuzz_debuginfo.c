/* libFuzzer target for what a hostile binary gives the separate-debug-info
 * readers (agent/debuginfo.c) and the demangler (agent/demangle.c).
 *
 * First byte odd: the rest is a symbol name for ember__demangle (cut at
 * any NUL), with a small output buffer so the "does not fit" path fires.
 * First byte even: the rest is an ELF file in memory; its .gnu_debuglink is
 * parsed and its .gnu_debugdata decompressed under a 1 MiB bound and read
 * as an ELF. No file is opened. Whatever the bytes: no crash, leak or
 * undefined behaviour; a debuglink name is a NUL-terminated base name; a
 * demangled name is as long as it says. */
#include <gelf.h>
#include <libelf.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "debuginfo.h"
#include "demangle.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fuzz_demangle(const uint8_t *data, size_t size) {
  char *name = malloc(size + 1);
  if (name == NULL) return;
  memcpy(name, data, size);
  name[size] = '\0';
  char out[512];
  size_t n = ember__demangle(name, out, sizeof out);
  if (n >= sizeof out || strlen(out) != n) abort();
  free(name);
}

static void fuzz_elf(const uint8_t *data, size_t size) {
  /* libelf may convert the image in place: give it a copy. */
  char *image = malloc(size ? size : 1);
  if (image == NULL) return;
  memcpy(image, data, size);
  Elf *elf = elf_memory(image, size);
  ember__debuginfo_t *d = NULL;
  ember__debuginfo_opts_t o = {.debug_dirs = "", .minidebug_max = 1u << 20};
  if (elf == NULL || elf_kind(elf) != ELF_K_ELF || ember__debuginfo_new(&o, &d) != 0) goto done;
  const char *name = NULL;
  uint32_t crc = 0;
  if (ember__debuginfo_link(d, elf, &name, &crc) == 0) {
    size_t n = strlen(name);
    if (n == 0 || n > NAME_MAX || strchr(name, '/') != NULL) abort();
  }
  ember__minidebug_t m = {0};
  if (ember__debuginfo_minidebug(d, elf, &m) == 0) {
    if (m.elf == NULL || m.size == 0 || m.size > (1u << 20)) abort();
    /* Walk what a symbol loader would. */
    for (Elf_Scn *scn = elf_nextscn(m.elf, NULL); scn != NULL; scn = elf_nextscn(m.elf, scn)) {
      GElf_Shdr sh;
      if (gelf_getshdr(scn, &sh) == NULL || sh.sh_type != SHT_SYMTAB) continue;
      Elf_Data *sd = elf_getdata(scn, NULL);
      size_t symsz = gelf_fsize(m.elf, ELF_T_SYM, 1, EV_CURRENT);
      if (sd == NULL || symsz == 0) continue;
      for (size_t i = 0; i < sd->d_size / symsz && i < 4096; i++) {
        GElf_Sym sym;
        if (gelf_getsym(sd, (int)i, &sym) != NULL) (void)elf_strptr(m.elf, sh.sh_link, sym.st_name);
      }
    }
    ember__minidebug_free(&m);
  }
done:
  ember__debuginfo_free(d);
  if (elf != NULL) elf_end(elf);
  free(image);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static int init;
  if (!init) {
    elf_version(EV_CURRENT);
    init = 1;
  }
  if (size == 0) return 0;
  if (data[0] & 1) {
    fuzz_demangle(data + 1, size - 1);
  } else {
    fuzz_elf(data + 1, size - 1);
  }
  return 0;
}
