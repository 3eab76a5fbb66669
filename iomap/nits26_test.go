package iomap_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/ext4io/ext4io/blockdev"
	"github.com/ext4io/ext4io/iomap"
)

// failWritesDev fails every write with an I/O error. It embeds the
// interface, not the memory device, so that write-back cannot take a
// vectored path around WriteAt.
type failWritesDev struct{ blockdev.Device }

func (failWritesDev) WriteAt([]byte, int64) (int, error) {
	return 0, fmt.Errorf("device write: %w", blockdev.ErrIO)
}

// TestSyncManyFailuresOneLine: Sync after the write-back of many files
// and many runs of each failed returns one error of one line, which says
// how many failed and wraps the first, and which errors.Is still matches
// ErrIO as each failure does.
func TestSyncManyFailuresOneLine(t *testing.T) {
	const bs, files, runs = 4096, 20, 5
	fs := newTinyFS(bs, 0, (1<<20)/bs)
	c, err := iomap.NewPageCache(failWritesDev{patternDev(t, 1<<20)}, iomap.PageCacheOptions{PageSize: bs, MaxPages: 1024})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	page := make([]byte, bs)
	for key := range iomap.Key(files) {
		for r := range int64(runs) {
			// Every other page: runs of one page each.
			if _, err := iomap.BufferedWrite(c, fs, key+1, page, 2*r*bs, 2*runs*bs); err != nil {
				t.Fatal(err)
			}
		}
	}
	err = c.Sync()
	if err == nil {
		t.Fatal("Sync with every write failing: no error")
	}
	msg := err.Error()
	if strings.Contains(msg, "\n") {
		t.Errorf("Sync error has %d lines: %.300q", strings.Count(msg, "\n")+1, msg)
	}
	if !strings.Contains(msg, fmt.Sprintf("%d errors", files*runs)) {
		t.Errorf("Sync error does not say %d failed: %.300q", files*runs, msg)
	}
	if len(msg) > 400 {
		t.Errorf("Sync error is %d bytes long: %.300q", len(msg), msg)
	}
	if !errors.Is(err, blockdev.ErrIO) {
		t.Errorf("Sync error %q does not match ErrIO", msg)
	}
}
