#include "pass_interrupt.h"

extern "C" bool lookup_pass_interrupted(void* interrupt) {
    return static_cast<const lookup::PassInterrupt*>(interrupt)->raised.load(std::memory_order_relaxed);
}
