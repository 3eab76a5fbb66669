#include "textflag.h"

// func cpuid(leaf, sub uint32) (eax, ebx, ecx, edx uint32)
TEXT ·cpuid(SB), NOSPLIT, $0-24
	MOVL leaf+0(FP), AX
	MOVL sub+4(FP), CX
	CPUID
	MOVL AX, eax+8(FP)
	MOVL BX, ebx+12(FP)
	MOVL CX, ecx+16(FP)
	MOVL DX, edx+20(FP)
	RET

// func clwbLines(b []byte)
TEXT ·clwbLines(SB), NOSPLIT, $0-24
	MOVQ b_base+0(FP), AX
	MOVQ b_len+8(FP), CX
	ADDQ AX, CX
	ANDQ $~63, AX
clwb:
	CMPQ AX, CX
	JAE  clwbdone
	CLWB (AX)
	ADDQ $64, AX
	JMP  clwb
clwbdone:
	SFENCE
	RET

// func clflushoptLines(b []byte)
TEXT ·clflushoptLines(SB), NOSPLIT, $0-24
	MOVQ b_base+0(FP), AX
	MOVQ b_len+8(FP), CX
	ADDQ AX, CX
	ANDQ $~63, AX
opt:
	CMPQ AX, CX
	JAE  optdone
	CLFLUSHOPT (AX)
	ADDQ $64, AX
	JMP  opt
optdone:
	SFENCE
	RET

// func clflushLines(b []byte)
TEXT ·clflushLines(SB), NOSPLIT, $0-24
	MOVQ b_base+0(FP), AX
	MOVQ b_len+8(FP), CX
	ADDQ AX, CX
	ANDQ $~63, AX
fl:
	CMPQ AX, CX
	JAE  fldone
	CLFLUSH (AX)
	ADDQ $64, AX
	JMP  fl
fldone:
	SFENCE
	RET
