package errordev_test

import (
	"errors"
	"fmt"
	"log"

	"github.com/ext4io/ext4io/blockdev"
	"github.com/ext4io/ext4io/blockdev/errordev"
	"github.com/ext4io/ext4io/blockdev/memdev"
)

// After makes a device that dies: every write from the third on fails
// with an error wrapping ErrInjected and blockdev.ErrIO.
func ExampleAfter() {
	dev := errordev.New(memdev.New(1<<20), errordev.After(errordev.Write, 2))
	for i := range int64(4) {
		_, err := dev.WriteAt([]byte{1}, i*512)
		fmt.Println("write", i, "failed:", errors.Is(err, blockdev.ErrIO))
	}
	// Output:
	// write 0 failed: false
	// write 1 failed: false
	// write 2 failed: true
	// write 3 failed: true
}

// Injectors compose. Here a Counter counts every operation, and a Toggle
// turns on failures of flushes only while the test wants them.
func ExampleToggle() {
	tog := errordev.NewToggle(errordev.Kinds(errordev.Always(), errordev.Flush))
	cnt := errordev.NewCounter(tog)
	dev := errordev.New(memdev.New(1<<20), cnt)

	fmt.Println("flush:", dev.Flush())
	tog.Enable()
	_, werr := dev.WriteAt([]byte("still fine"), 0)
	ferr := dev.Flush()
	fmt.Println("write:", werr, "flush failed:", errors.Is(ferr, errordev.ErrInjected))
	fmt.Println("flushes", cnt.Count(errordev.Flush), "failed", cnt.Failed(errordev.Flush))
	// Output:
	// flush: <nil>
	// write: <nil> flush failed: true
	// flushes 2 failed 1
}

// Func writes an injector inline: fail reads of one byte range, as a bad
// sector would.
func ExampleFunc() {
	bad := errordev.Func(func(op errordev.Op) error {
		if op.Kind == errordev.Read && op.Off < 8192 && op.Off+op.Len > 4096 {
			return fmt.Errorf("sector 8: %w", blockdev.ErrIO)
		}
		return nil
	})
	dev := errordev.New(memdev.New(1<<20), bad)
	buf := make([]byte, 512)
	_, err := dev.ReadAt(buf, 0)
	fmt.Println(err)
	_, err = dev.ReadAt(buf, 4096)
	fmt.Println(errors.Is(err, blockdev.ErrIO))
	// Output:
	// <nil>
	// true
}

// A Crashable remembers what a power cut would keep: everything covered
// by a completed Flush, plus (by CrashOptions) some of the writes since.
func ExampleCrashable_Crash() {
	c, err := errordev.NewCrashable(memdev.New(1 << 20))
	if err != nil {
		log.Fatal(err)
	}
	if _, err := c.WriteAt([]byte("durable"), 0); err != nil {
		log.Fatal(err)
	}
	if err := c.Flush(); err != nil {
		log.Fatal(err)
	}
	if _, err := c.WriteAt([]byte("volatile"), 4096); err != nil {
		log.Fatal(err)
	}
	fmt.Println("unflushed operations:", c.Unflushed())

	for _, keep := range []float64{0, 1} {
		img, err := c.Crash(errordev.CrashOptions{Seed: 1, KeepProb: keep})
		if err != nil {
			log.Fatal(err)
		}
		a, b := make([]byte, 7), make([]byte, 8)
		img.ReadAt(a, 0)
		img.ReadAt(b, 4096)
		fmt.Printf("KeepProb %v: %q %q\n", keep, a, b)
	}
	// Output:
	// unflushed operations: 1
	// KeepProb 0: "durable" "\x00\x00\x00\x00\x00\x00\x00\x00"
	// KeepProb 1: "durable" "volatile"
}
