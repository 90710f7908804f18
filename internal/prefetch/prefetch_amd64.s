#include "textflag.h"

// func Addr(addr unsafe.Pointer)
TEXT ·Addr(SB), NOSPLIT|NOFRAME, $0-8
	MOVQ addr+0(FP), AX
	PREFETCHT0 (AX)
	RET
