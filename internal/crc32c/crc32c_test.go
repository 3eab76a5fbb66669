package crc32c

import (
	"hash/crc32"
	"testing"
)

func TestKernelMatchesStdlibWithFullInversion(t *testing.T) {
	p := []byte("123456789")
	// The standard CRC-32C check value is crc32c with seed ^0 and a final inversion.
	if got, want := ^Kernel(^uint32(0), p), uint32(0xE3069283); got != want {
		t.Fatalf("check value %#x, want %#x", got, want)
	}
	if got, want := ^Kernel(^uint32(0), p), crc32.Checksum(p, castagnoli); got != want {
		t.Fatalf("%#x != stdlib %#x", got, want)
	}
	// Chaining equals one pass.
	if a, b := Kernel(Kernel(7, p[:4]), p[4:]), Kernel(7, p); a != b {
		t.Fatalf("chained %#x != single %#x", a, b)
	}
	if a, b := KernelU32(5, 0x01020304), Kernel(5, []byte{4, 3, 2, 1}); a != b {
		t.Fatalf("KernelU32 %#x != %#x", a, b)
	}
	for _, v := range []uint32{0, 1, 0xFFFFFFFF, 0x80000001, 0xDEADBEEF} {
		le := []byte{byte(v), byte(v >> 8), byte(v >> 16), byte(v >> 24)}
		if a, b := KernelU32(^uint32(0), v), Kernel(^uint32(0), le); a != b {
			t.Fatalf("KernelU32(^0, %#x) %#x != %#x", v, a, b)
		}
	}
	if n := testing.AllocsPerRun(100, func() { KernelU32(5, 0x01020304) }); n != 0 {
		t.Fatalf("KernelU32 allocates %v times", n)
	}
}
