package ext4io_test

// Bad input: the corrupt images of e2fsprogs' test suite, a sweep of
// randomly damaged metadata blocks, and a fuzz target. Every image is
// opened and walked whole (every directory listed, every file read and
// mapped, every symlink read) in a goroutine with a deadline and recover:
// no panic, no hang, and every error wraps one of ext4io's sentinels.
//
// This file holds the walk they share; damage_e2fsprogs_test.go,
// damage_sweep_test.go, damage_write_test.go, damage_random_test.go,
// damage_fuzz_test.go and damage_inode_test.go the rest, by subject.

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/internal/e2fs"
)

// sentinels are the errors every ext4io failure must wrap.
var sentinels = []struct {
	name string
	err  error
}{
	{"corrupt", ext4io.ErrCorrupt},
	{"unsupported", ext4io.ErrUnsupported},
	{"notfound", fs.ErrNotExist},
	{"invalid", ext4io.ErrInvalid},
	{"io", ext4io.ErrIO},
}

// sentinelOf names the first sentinel err wraps, or "" if none.
func sentinelOf(err error) string {
	for _, s := range sentinels {
		if errors.Is(err, s.err) {
			return s.name
		}
	}
	return ""
}

// walkStats is what a whole-volume walk saw.
type walkStats struct {
	openErr          error
	entries          int
	files, dirs, lnk int
	bytes            int64
	errs             map[string]int // by sentinel name
	unwrapped        []string       // errors wrapping no sentinel
	bareCorrupt      []string       // ErrCorrupt errors with no *CorruptError inside
	firstCorrupt     error
	firstOther       error // first error that is not ErrCorrupt
	dirCycles        int
}

func (s *walkStats) note(op, path string, err error) {
	if s.errs == nil {
		s.errs = map[string]int{}
	}
	k := sentinelOf(err)
	if k == "" {
		s.unwrapped = append(s.unwrapped, fmt.Sprintf("%s %s: %v (%T)", op, path, err, err))
		k = "UNWRAPPED"
	}
	s.errs[k]++
	if k != "corrupt" && s.firstOther == nil {
		s.firstOther = fmt.Errorf("%s %s: %w", op, path, err)
	}
	if k == "corrupt" {
		if s.firstCorrupt == nil {
			s.firstCorrupt = err
		}
		var ce *ext4io.CorruptError
		if !errors.As(err, &ce) {
			s.bareCorrupt = append(s.bareCorrupt, fmt.Sprintf("%s %s: %v", op, path, err))
		}
	}
}

func (s *walkStats) corrupt() int { return s.errs["corrupt"] }

// walkLimits bound a walk of a damaged volume: corrupt sizes can claim
// terabytes, corrupt directories can form cycles.
const (
	walkMaxEntries   = 20000
	walkMaxFileBytes = 32 << 20
	walkChunk        = 1 << 20
)

// walkVolume lists, stats, reads, maps and readlinks everything in v.
// onFile, if set, gets the contents of each regular file read whole.
func walkVolume(v *ext4io.Volume, onFile func(path string, data []byte)) *walkStats {
	st := &walkStats{errs: map[string]int{}}
	fsys := v.FS()
	seen := map[uint32]bool{}
	buf := make([]byte, walkChunk)
	fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			st.note("walk", p, err)
			return nil
		}
		st.entries++
		if st.entries > walkMaxEntries {
			return fs.SkipAll
		}
		info, err := d.Info()
		if err != nil {
			st.note("info", p, err)
			return nil
		}
		fi := info.(*ext4io.FileInfo)
		if _, err := v.Stat(p); err != nil {
			// A symlink may dangle; anything else must stat.
			if d.Type()&fs.ModeSymlink == 0 || !errors.Is(err, fs.ErrNotExist) {
				st.note("stat", p, err)
			}
		}
		switch {
		case d.IsDir():
			st.dirs++
			if seen[fi.Ino] {
				st.dirCycles++
				return fs.SkipDir
			}
			seen[fi.Ino] = true
			if _, err := v.ReadDir(p); err != nil {
				st.note("readdir", p, err)
			}
			if f, err := v.Open(p); err != nil {
				st.note("open", p, err)
			} else {
				if _, err := f.Extents(); err != nil {
					st.note("extents", p, err)
				}
				f.Close()
			}
		case d.Type()&fs.ModeSymlink != 0:
			st.lnk++
			if _, err := v.Readlink(p); err != nil {
				st.note("readlink", p, err)
			}
			if _, err := fsys.ReadLink(p); err != nil {
				st.note("fs.readlink", p, err)
			}
		case d.Type().IsRegular():
			st.files++
			f, err := v.Open(p)
			if err != nil {
				st.note("open", p, err)
				return nil
			}
			defer f.Close()
			if _, err := f.Extents(); err != nil {
				st.note("extents", p, err)
			}
			size := f.Size()
			var whole []byte
			if onFile != nil && size <= walkMaxFileBytes {
				whole = make([]byte, 0, size)
			}
			// Read up to the cap, then the last chunk.
			var off int64
			for off < size {
				if off >= walkMaxFileBytes {
					off = max(off, size-walkChunk)
				}
				n, err := f.ReadAt(buf, off)
				st.bytes += int64(n)
				if whole != nil {
					whole = append(whole, buf[:n]...)
				}
				if err != nil && err != io.EOF {
					st.note("read", p, err)
					return nil
				}
				if n == 0 {
					st.note("read", p, fmt.Errorf("ReadAt(%d) of a %d-byte file returned 0, nil", off, size))
					return nil
				}
				off += int64(n)
			}
			if whole != nil {
				onFile(p, whole)
			}
		}
		return nil
	})
	return st
}

// openAndWalk opens dev and walks it under guarded. It returns nil after
// a panic or a timeout (already reported).
func openAndWalk(t testing.TB, label string, deadline time.Duration, open func() (*ext4io.Volume, error), onFile func(string, []byte)) *walkStats {
	t.Helper()
	var st *walkStats
	ok := guarded(t, label, deadline, func() {
		v, err := open()
		if err != nil {
			st = &walkStats{openErr: err, errs: map[string]int{}}
			st.note("open volume", "", err)
			return
		}
		defer v.Close()
		st = walkVolume(v, onFile)
	})
	if !ok {
		return nil
	}
	for _, u := range st.unwrapped {
		t.Errorf("%s: error wraps no sentinel: %s", label, u)
	}
	for _, b := range st.bareCorrupt {
		t.Errorf("%s: ErrCorrupt without a *CorruptError (no context): %s", label, b)
	}
	return st
}

// replayedCopy returns img itself if its journal needs no recovery, else a
// copy whose journal e2fsck -E journal_only replayed.
func replayedCopy(t *testing.T, img string) string {
	t.Helper()
	b, err := os.ReadFile(img)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) < 2048 || b[1024+0x60]&0x4 == 0 {
		return img
	}
	ref := img + ".replayed"
	if err := os.WriteFile(ref, b, 0o644); err != nil {
		t.Fatal(err)
	}
	exec.Command(e2fs.Tool(t, "e2fsck"), "-E", "journal_only", "-y", ref).Run()
	return ref
}
