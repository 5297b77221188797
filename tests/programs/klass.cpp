// A C++ fixture for the symbolizer's demangling: a member function in a
// namespace, hot in a loop, so its frames must read ns::Klass::method(int).
//
//   klass          print "pid", "method" (the function's address),
//                  "ret_method" (a real return address inside main's loop)
//                  and "ret_inline" (one inside ns::Klass::step, which is
//                  inlined into method), then "ready", then spin calling
//                  ns::Klass::method forever
//
// C++ only because the symbol must be mangled by a real C++ compiler; it
// prints through iostream so that it maps libstdc++ (whose thousands of
// mangled names the tests demangle and time).
#include <iostream>
#include <unistd.h>

namespace ns {
struct Klass {
  int method(int);
  void step();
};
} // namespace ns

static void *ret_method;
static void *ret_inline;
static volatile unsigned long sink;

__attribute__((noinline)) static void probe() {
  ret_inline = __builtin_return_address(0);
  sink = sink + 1;
}

// -fno-inline does not stop always_inline: an inline frame of method.
inline __attribute__((always_inline)) void ns::Klass::step() {
  probe();
  sink = sink + 3;
}

__attribute__((noinline)) int ns::Klass::method(int x) {
  ret_method = __builtin_return_address(0);
  step();
  unsigned long v = 0;
  for (int i = 0; i < x; i++) v += static_cast<unsigned long>(i) * 3u + sink;
  sink = v;
  return static_cast<int>(v & 0xff);
}

int main() {
  ns::Klass k;
  k.method(1);
  // A member function's address, as the code it names.
  int (ns::Klass::*pm)(int) = &ns::Klass::method;
  void *addr = nullptr;
  static_assert(sizeof pm >= sizeof addr, "an Itanium member pointer starts with the address");
  __builtin_memcpy(&addr, &pm, sizeof addr);
  std::cout << "pid " << getpid() << "\nmethod " << addr << "\nret_method " << ret_method
            << "\nret_inline " << ret_inline << "\nready" << std::endl;
  for (;;) k.method(1000);
}
