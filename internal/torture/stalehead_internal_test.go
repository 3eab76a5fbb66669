package torture

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev/errordev"
	"github.com/ext4io/ext4io/blockdev/memdev"
)

// staleHeadImage returns the first crash image of a fast commit followed
// by a full commit (Volume.Sync) whose fast-commit area starts with a
// stale HEAD, and the contents of the file the fast commit made durable.
func staleHeadImage(t *testing.T) (*memdev.Device, []byte) {
	t.Helper()
	dev := memdev.NewBlockSize(32<<20, 4096)
	require.NoError(t, ext4io.Format(dev, ext4io.FormatOptions{FastCommit: true}))
	rec, err := errordev.NewRecorder(dev)
	require.NoError(t, err)
	v, err := ext4io.Open(rec, ext4io.Options{Writable: true})
	require.NoError(t, err)
	require.NoError(t, v.Mkdir("/w", 0o755))
	require.NoError(t, v.Sync())
	data := bytes.Repeat([]byte("stale head "), 1000)
	f, err := v.Create("/w/a")
	require.NoError(t, err)
	_, err = f.WriteAt(data, 0)
	require.NoError(t, err)
	require.NoError(t, f.Sync())
	require.EqualValues(t, 1, v.Counters().FastCommits, "the fsync must be a fast commit")
	fcEnd := rec.Len()
	require.NoError(t, v.Sync()) // a full commit of the fast commit's tid
	// The crash leaves the volume open: no Close, no checkpoint after.
	for p := fcEnd; p < rec.Len(); p++ {
		img, _, err := rec.CrashAt(p, errordev.CrashAtOptions{KeepProb: 1})
		require.NoError(t, err)
		h, err := readFCHead(img)
		require.NoError(t, err)
		if h.head && h.end == h.tid+1 { // the HEAD of the log's last transaction
			t.Logf("crash point %d of %d: %v", p, rec.Len(), h)
			return img, data
		}
	}
	t.Fatal("no crash point after the full commit has a stale HEAD")
	return nil, nil
}

// wantFiles returns a model check: each name must hold its contents.
func wantFiles(files map[string][]byte) func(*ext4io.Volume) error {
	return func(v *ext4io.Volume) error {
		for name, want := range files {
			got, err := v.ReadFile(name)
			if err != nil {
				return fmt.Errorf("synced %s: %w", name, err)
			}
			if !bytes.Equal(got, want) {
				return fmt.Errorf("synced %s: contents differ (%d bytes, want %d)", name, len(got), len(want))
			}
		}
		return nil
	}
}

// e2fsckRng returns a generator whose first IntN(4) is 0: recoverAndCheckFn
// then recovers by e2fsck.
func e2fsckRng() *rand.Rand {
	for s := uint64(0); ; s++ {
		if rand.New(rand.NewPCG(s, 0)).IntN(4) == 0 {
			return rand.New(rand.NewPCG(s, 0))
		}
	}
}

func stRunner(t *testing.T, linux bool) *runner {
	fsck, err := exec.LookPath("e2fsck")
	if err != nil {
		t.Skip("e2fsck not installed")
	}
	return &runner{cfg: Config{Dir: t.TempDir()}, fsck: fsck, linux: linux && linuxAvailable()}
}

// TestStaleHeadE2fsckLoses shows the e2fsck 1.47.0 limitation the
// classifier is for: on the stale-HEAD image its recovery fails and the
// fsynced file is gone, while ext4io's replay has it.
func TestStaleHeadE2fsckLoses(t *testing.T) {
	r := stRunner(t, false)
	img, data := staleHeadImage(t)
	e2, err := img.Clone()
	require.NoError(t, err)
	out, _, err := r.e2fsck(e2, "-fy", true)
	require.NoError(t, err)
	assert.Contains(t, out, e2fsckStaleHeadMsg)
	v, err := ext4io.Open(e2, ext4io.Options{})
	require.NoError(t, err)
	assert.Error(t, wantFiles(map[string][]byte{"/w/a": data})(v), "e2fsck kept the file: the image does not show the limitation")
	v.Close()

	v, err = ext4io.Open(img, ext4io.Options{}) // ext4io's replay, in memory
	require.NoError(t, err)
	assert.NoError(t, wantFiles(map[string][]byte{"/w/a": data})(v))
	v.Close()
}

// TestStaleHeadClassified: the torture's e2fsck recovery of a stale-HEAD
// image is replaced by ext4io's (and Linux's, as root), and the image
// passes the checks.
func TestStaleHeadClassified(t *testing.T) {
	for _, linux := range []bool{false, true} {
		t.Run(fmt.Sprintf("linux=%v", linux), func(t *testing.T) {
			r := stRunner(t, linux)
			if linux && !r.linux {
				t.Skip("Linux cannot mount images here (root and loop devices needed)")
			}
			img, data := staleHeadImage(t)
			require.NoError(t, r.recoverAndCheckFn(img, e2fsckRng(), wantFiles(map[string][]byte{"/w/a": data})))
			assert.Equal(t, 1, r.sum.RecoveredByE2fsck)
			assert.Equal(t, 1, r.sum.StaleHead)
			assert.Equal(t, map[bool]int{false: 0, true: 1}[linux], r.sum.StaleHeadLinux)
			// img was recovered in place (the next round starts from it).
			h, err := readFCHead(img)
			require.NoError(t, err)
			assert.False(t, h.head, "recovered image still needs recovery: %v", h)
		})
	}
}

// TestStaleHeadDoesNotHideLoss: a stale-HEAD image where a synced file is
// missing after ext4io's (and Linux's) recovery still fails the round.
func TestStaleHeadDoesNotHideLoss(t *testing.T) {
	for _, linux := range []bool{false, true} {
		t.Run(fmt.Sprintf("linux=%v", linux), func(t *testing.T) {
			r := stRunner(t, linux)
			if linux && !r.linux {
				t.Skip("Linux cannot mount images here (root and loop devices needed)")
			}
			img, data := staleHeadImage(t)
			err := r.recoverAndCheckFn(img, e2fsckRng(), wantFiles(map[string][]byte{"/w/a": data, "/w/b": []byte("synced, then lost")}))
			require.Error(t, err)
			assert.Contains(t, err.Error(), "synced /w/b")
			if linux {
				assert.Contains(t, err.Error(), "after recovery by Linux")
			} else {
				assert.Contains(t, err.Error(), "ext4io Open(Writable), as e2fsck -fy stopped at a stale fast-commit HEAD")
			}
		})
	}
}

// TestNewerHeadE2fsckFailureFails: e2fsck's recovery failing on a HEAD
// whose tid is newer than the log's end is not the stale case and fails
// the round, though ext4io's replay has every file.
func TestNewerHeadE2fsckFailureFails(t *testing.T) {
	r := stRunner(t, false)
	img, data := staleHeadImage(t)
	h, err := readFCHead(img)
	require.NoError(t, err)
	// Find the area's first block on the device by its contents and give
	// its HEAD (tag, len, fc_features, fc_tid) a tid after the log's end.
	v, err := ext4io.Open(img, ext4io.Options{NoRecovery: true})
	require.NoError(t, err)
	j, err := v.Journal()
	require.NoError(t, err)
	blocks, err := j.FastCommitBlocks()
	require.NoError(t, err)
	v.Close()
	buf := make([]byte, 4096)
	at := int64(-1)
	for off := int64(0); off < img.Size(); off += 4096 {
		_, err := img.ReadAt(buf, off)
		require.NoError(t, err)
		if bytes.Equal(buf, blocks[0]) {
			require.Equal(t, int64(-1), at, "the area's first block is not unique on the device")
			at = off
		}
	}
	require.NotEqual(t, int64(-1), at)
	binary.LittleEndian.PutUint32(buf[:4], h.end+5)
	_, err = img.WriteAt(buf[:4], at+8)
	require.NoError(t, err)
	h2, err := readFCHead(img)
	require.NoError(t, err)
	require.True(t, h2.head)
	require.Equal(t, h.end+5, h2.tid)

	err = r.recoverAndCheckFn(img, e2fsckRng(), wantFiles(map[string][]byte{"/w/a": data}))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "not a stale fast-commit HEAD")
	assert.Contains(t, err.Error(), e2fsckStaleHeadMsg)
	assert.Zero(t, r.sum.StaleHead)
}
