package torture

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev"
)

// testHookSecondWriter, if set, replaces the device a second writable open
// tries (tests prove a second writer that gets in is reported).
var testHookSecondWriter func(blockdev.Device) blockdev.Device

// contender opens the round's device beside its writable Volume, from its
// own goroutine, at random moments: a second writer (Open with Writable or
// Replay, Format, and for file-backed rounds Open of another
// blockdev.OpenFile of the image) must fail with ErrBusy (one writer per
// image: blockdev.Claim), and must leave the writer undisturbed; a
// read-only open must work (open, stat the root, close). It is used by one
// goroutine.
type contender struct {
	dev  blockdev.Device // the Device value the writer opened
	path string          // file-backed rounds: the image file; "": none
	rng  *rand.Rand

	refused  int // writable opens refused with ErrBusy
	readOnly int // read-only opens that worked
	err      error
}

// run attempts opens until stop is closed, then once more if it never
// did; it stops at the first failure (c.err).
func (c *contender) run(stop <-chan struct{}) {
	for c.err == nil {
		t := time.NewTimer(time.Duration(c.rng.IntN(15000)) * time.Microsecond)
		select {
		case <-stop:
			t.Stop()
			if c.refused+c.readOnly == 0 {
				c.err = c.once()
			}
			return
		case <-t.C:
		}
		c.err = c.once()
	}
	<-stop
}

// once makes one attempt, of a kind drawn at random.
func (c *contender) once() error {
	switch k := c.rng.IntN(8); {
	case k < 2:
		return c.readOnlyOpen()
	case k == 2:
		// Replay writes the journal home: it claims the device too.
		return c.refuse(func() error {
			v, err := ext4io.Open(c.dev, ext4io.Options{Replay: true})
			if err == nil {
				v.Close()
			}
			return err
		}, "Open(Replay) of the writer's device")
	case k == 3:
		return c.refuse(func() error {
			return ext4io.Format(c.dev, ext4io.FormatOptions{BlockSize: 1024})
		}, "Format of the writer's device")
	case k == 4 && c.path != "":
		// Another Device on the same file: the claim is keyed by the
		// file's identity (and flock), not by the Device value.
		fdev, err := blockdev.OpenFile(c.path, false)
		if err != nil {
			return fmt.Errorf("second writer: blockdev.OpenFile %s: %w", c.path, err)
		}
		defer fdev.Close()
		return c.writable(fdev, "blockdev.OpenFile + Open(Writable)")
	default:
		return c.writable(c.dev, "Open(Writable) of the writer's device")
	}
}

// writable tries a writable open of dev, which must be refused.
func (c *contender) writable(dev blockdev.Device, how string) error {
	if testHookSecondWriter != nil {
		dev = testHookSecondWriter(dev)
	}
	return c.refuse(func() error {
		v, err := ext4io.Open(dev, ext4io.Options{Writable: true})
		if err == nil {
			v.Close()
		}
		return err
	}, how)
}

// refuse runs call, a second writer, which must fail with ErrBusy.
func (c *contender) refuse(call func() error, how string) error {
	err := call()
	if err == nil {
		return fmt.Errorf("second writer: %s beside the round's writable Volume succeeded", how)
	}
	if !errors.Is(err, ext4io.ErrBusy) {
		return fmt.Errorf("second writer: %s: want an error wrapping ErrBusy, got: %w", how, err)
	}
	c.refused++
	return nil
}

// readOnlyOpen opens dev read-only beside the writer, stats the root and
// closes it.
func (c *contender) readOnlyOpen() error {
	v, err := ext4io.Open(c.dev, ext4io.Options{})
	if err != nil {
		return fmt.Errorf("read-only open beside the writer: %w", err)
	}
	fi, err := v.Stat("/")
	if err == nil && !fi.IsDir() {
		err = fmt.Errorf("not a directory: %v", fi.Mode())
	}
	if err != nil {
		v.Close()
		return fmt.Errorf("read-only open beside the writer: stat /: %w", err)
	}
	if err := v.Close(); err != nil {
		return fmt.Errorf("read-only open beside the writer: close: %w", err)
	}
	c.readOnly++
	return nil
}

// contend runs a contender beside fn (the round's workers) and returns
// fn's error, or else the contender's.
func contend(c *contender, fn func() error) error {
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		c.run(stop)
	}()
	err := fn()
	close(stop)
	wg.Wait()
	if err != nil {
		return err
	}
	return c.err
}
