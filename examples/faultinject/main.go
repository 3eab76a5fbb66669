// Unit-testing filesystem logic with the memory device and fault
// injection: run the code under test on a memdev, then again with the
// n-th device write failing (errordev.OnIndex), for every n the clean run
// reached. Each failure must come back to the caller as an error wrapping
// ext4io.ErrIO — never a panic, never a silent success. main_test.go is
// the same loop as a Go test.
//
//	go run ./examples/faultinject
package main

import (
	"errors"
	"fmt"
	"io"
	"log"
	"os"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev"
	"github.com/ext4io/ext4io/blockdev/errordev"
	"github.com/ext4io/ext4io/blockdev/memdev"
)

// SaveConfig is the "application logic" under test: it stores data as a
// new file and makes it durable.
func SaveConfig(v *ext4io.Volume, name string, data []byte) error {
	f, err := v.Create(name)
	if err != nil {
		return fmt.Errorf("save %s: %w", name, err)
	}
	defer f.Close()
	if _, err := f.WriteAt(data, 0); err != nil {
		return fmt.Errorf("save %s: %w", name, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("save %s: %w", name, err)
	}
	return nil
}

// formatted returns a freshly formatted memory device.
func formatted() (*memdev.Device, error) {
	dev := memdev.New(32 << 20)
	return dev, ext4io.Format(dev, ext4io.FormatOptions{})
}

// attempt opens the volume on dev and saves the config.
func attempt(dev blockdev.Device) error {
	v, err := ext4io.Open(dev, ext4io.Options{Writable: true})
	if err != nil {
		return fmt.Errorf("open: %w", err)
	}
	err = SaveConfig(v, "/app.conf", []byte("answer = 42\n"))
	if cerr := v.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("close: %w", cerr)
	}
	return err
}

// Outcome is what one injected fault did.
type Outcome struct {
	N   int64 // the failing write's index
	Err error
}

// Sweep counts the writes of a clean run, then fails each one in turn.
func Sweep() (writes int64, outcomes []Outcome, err error) {
	base, err := formatted()
	if err != nil {
		return 0, nil, err
	}
	counter := errordev.NewCounter(errordev.Func(func(errordev.Op) error { return nil }))
	clone, err := base.Clone()
	if err != nil {
		return 0, nil, err
	}
	if err := attempt(errordev.New(clone, counter)); err != nil {
		return 0, nil, fmt.Errorf("clean run failed: %w", err)
	}
	writes = counter.Count(errordev.Write)
	for n := range writes {
		clone, err := base.Clone()
		if err != nil {
			return 0, nil, err
		}
		outcomes = append(outcomes, Outcome{N: n, Err: attempt(errordev.New(clone, errordev.OnIndex(errordev.Write, n)))})
	}
	return writes, outcomes, nil
}

func main() {
	if err := run(os.Stdout); err != nil {
		log.Fatal(err)
	}
}

func run(w io.Writer) error {
	writes, outs, err := Sweep()
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "a clean open+save+close issues %d device writes; failing each in turn:\n", writes)
	wrapped := 0
	for _, o := range outs {
		switch {
		case o.Err == nil:
			fmt.Fprintf(w, "  write %2d failed: LOST — the caller saw success\n", o.N)
		case errors.Is(o.Err, ext4io.ErrIO):
			wrapped++
			fmt.Fprintf(w, "  write %2d failed: %v\n", o.N, o.Err)
		default:
			fmt.Fprintf(w, "  write %2d failed: error without ErrIO: %v\n", o.N, o.Err)
		}
	}
	fmt.Fprintf(w, "%d of %d injected faults reached the caller wrapping ext4io.ErrIO\n", wrapped, len(outs))
	return nil
}
