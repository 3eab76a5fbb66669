package ext4io_test

// Multiple mount protection against mkfs.ext4 -O mmp images, a second
// Volume, a second process and Linux itself. The update interval is 1 s
// (mkfs -E mmp_update_interval=1) and the open protocol's wait is cut to
// mmpTestWait, so a test takes seconds, not the kernel's 11.

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev"
	"github.com/ext4io/ext4io/internal/e2fs"
	"github.com/ext4io/ext4io/layout"
	"github.com/stretchr/testify/require"
)

// mmpTestWait is the open protocol's wait in the whole test binary
// (ext4io.MMPTestWait, set once, so MMP tests run in parallel): longer
// than two update intervals of 1 s, a holder's updates must show within it.
const mmpTestWait = ext4io.MMPTestWait

// mkfsMMP makes an mmp image with a 1 s update interval.
func mkfsMMP(t *testing.T, args ...string) string {
	t.Helper()
	img := filepath.Join(t.TempDir(), "mmp.img")
	e2fs.Mkfs(t, img, "64M", append([]string{"-O", "mmp", "-E", "mmp_update_interval=1"}, args...)...)
	return img
}

// readMMP decodes img's MMP block from the file (bypassing ext4io).
func readMMP(t *testing.T, img string) (*layout.Superblock, *layout.MMP) {
	t.Helper()
	b, err := os.ReadFile(img)
	require.NoError(t, err)
	sb, err := layout.DecodeSuperblock(b[layout.SuperblockOffset:])
	require.NoError(t, err)
	m, err := layout.DecodeMMP(b[int(sb.MmpBlock)*sb.BlockSize():], sb.MmpBlock)
	require.NoError(t, err)
	require.NoError(t, m.VerifyChecksum(sb.MetadataCsum(), sb.CsumSeed(), sb.MmpBlock))
	return sb, m
}

// writeMMPSeq stores seq in img's MMP block (checksum updated).
func writeMMPSeq(t *testing.T, img string, seq uint32) {
	t.Helper()
	sb, m := readMMP(t, img)
	m.Seq = seq
	m.SetChecksum(sb.MetadataCsum(), sb.CsumSeed())
	f, err := os.OpenFile(img, os.O_RDWR, 0)
	require.NoError(t, err)
	defer f.Close()
	if _, err := f.WriteAt(m.Raw[:], int64(sb.MmpBlock)*int64(sb.BlockSize())); err != nil {
		t.Fatal(err)
	}
}

// debugfsMMPSeq returns the sequence debugfs's dump_mmp reports.
func debugfsMMPSeq(t *testing.T, img string) string {
	t.Helper()
	out := e2fs.Debugfs(t, img, false, "dump_mmp")
	for _, l := range strings.Split(out, "\n") {
		if s, ok := strings.CutPrefix(strings.TrimSpace(l), "sequence: "); ok {
			return s
		}
	}
	t.Fatalf("no sequence in dump_mmp:\n%s", out)
	return ""
}

// devVolume is a Volume opened on its own file handle, as another node of
// shared storage would open it (otherNode); Close closes both.
type devVolume struct {
	*ext4io.Volume
	dev *blockdev.File
}

func (d devVolume) Close() error { return errors.Join(d.Volume.Close(), d.dev.Close()) }

// otherNode is a device as another machine sharing the storage sees it:
// the host's locks (blockdev.Claim's registry and flock) do not reach it,
// so multiple mount protection is all that stands between two writers.
type otherNode struct {
	blockdev.Device
	f *blockdev.File
}

func (o *otherNode) Invalidate(off, n int64) error { return o.f.Invalidate(off, n) }

func openDev(img string, opts ext4io.Options) (devVolume, error) {
	dev, err := blockdev.OpenFile(img, !opts.Writable && !opts.Replay)
	if err != nil {
		return devVolume{}, err
	}
	v, err := ext4io.Open(&otherNode{dev, dev}, opts)
	if err != nil {
		dev.Close()
		return devVolume{}, err
	}
	return devVolume{v, dev}, nil
}

func TestMMPWaitIsLinux(t *testing.T) {
	for _, tt := range []struct {
		update, check uint16
		want          time.Duration
	}{
		{0, 0, 11 * time.Second}, // minimum check interval 5: 2*5+1
		{1, 5, 11 * time.Second},
		{5, 5, 11 * time.Second},
		{7, 0, 15 * time.Second},
		{1, 20, 41 * time.Second}, // the block's larger check interval wins
		{100, 0, 160 * time.Second},
	} {
		if got := ext4io.MMPWait(tt.update, tt.check); got != tt.want {
			t.Errorf("wait(update %d, check %d) = %v, want %v", tt.update, tt.check, got, tt.want)
		}
	}
}

// TestMMPWritable: (a) an mkfs.ext4 -O mmp image opens writable; while it
// is open the block carries our node name and a sequence that changes
// every update interval; after Close the sequence is CLEAN (debugfs
// dump_mmp), e2fsck finds the image clean and Linux mounts it.
func TestMMPWritable(t *testing.T) {
	t.Parallel()
	img := mkfsMMP(t)
	start := time.Now()
	v, err := openDev(img, ext4io.Options{Writable: true})
	if err != nil {
		t.Fatalf("writable Open: %v", err)
	}
	if d := time.Since(start); d < mmpTestWait {
		t.Errorf("Open took %v, less than the protocol's wait %v", d, mmpTestWait)
	}
	_, m1 := readMMP(t, img)
	host, _ := os.Hostname()
	if m1.Seq > layout.MMPSeqMax || m1.NodenameString() != host {
		t.Fatalf("open MMP block: seq %#x node %q, want a live sequence from %q", m1.Seq, m1.NodenameString(), host)
	}
	f, err := v.Create("file")
	require.NoError(t, err)
	data := bytes.Repeat([]byte("mmp!"), 5000)
	if _, err := f.WriteAt(data, 0); err != nil {
		t.Fatal(err)
	}
	require.NoError(t, f.Close())
	time.Sleep(2500 * time.Millisecond)
	_, m2 := readMMP(t, img)
	if m2.Seq == m1.Seq || m2.Seq > layout.MMPSeqMax {
		t.Fatalf("MMP sequence %#x then %#x: the updater does not run", m1.Seq, m2.Seq)
	}
	require.NoError(t, v.Close())
	if seq := debugfsMMPSeq(t, img); seq != fmt.Sprintf("%x", uint32(layout.MMPSeqClean)) {
		t.Fatalf("after Close debugfs dump_mmp says sequence %s, want clean", seq)
	}
	e2fs.Fsck(t, img)
	if got := e2fs.Dump(t, img, "file"); !bytes.Equal(got, data) {
		t.Fatalf("debugfs reads %d bytes back, want %d", len(got), len(data))
	}
}

// TestMMPSecondWriterRefused: (b) while one Volume holds the image, a
// second writable Open on its own handle and one in a second process are
// refused with ErrBusy after the wait; read-only opens go on (as Linux's
// ro mounts); once the holder closes, a writable open succeeds.
func TestMMPSecondWriterRefused(t *testing.T) {
	t.Parallel()
	img := mkfsMMP(t)
	v, err := openDev(img, ext4io.Options{Writable: true})
	if err != nil {
		t.Fatalf("first writable Open: %v", err)
	}
	defer v.Close()

	start := time.Now()
	_, err = openDev(img, ext4io.Options{Writable: true})
	if !errors.Is(err, ext4io.ErrBusy) {
		t.Fatalf("second writable Open: %v, want ErrBusy", err)
	}
	if d := time.Since(start); d < mmpTestWait {
		t.Errorf("second Open refused after %v, before the protocol's wait %v", d, mmpTestWait)
	}
	t.Logf("second Open refused after %v: %v", time.Since(start), err)

	out, err := helperProcess(t, img, "writable")
	if err != nil || !strings.Contains(out, "refused: busy") {
		t.Fatalf("second process: %v\n%s", err, out)
	}
	t.Logf("second process: %s", strings.TrimSpace(out))

	r, err := openDev(img, ext4io.Options{})
	if err != nil {
		t.Fatalf("read-only Open while held: %v", err)
	}
	r.Close()

	require.NoError(t, v.Close())
	out, err = helperProcess(t, img, "writable")
	if err != nil || !strings.Contains(out, "opened") {
		t.Fatalf("second process after Close: %v\n%s", err, out)
	}
	e2fs.Fsck(t, img)
	if seq := debugfsMMPSeq(t, img); seq != "ff4d4d50" {
		t.Fatalf("sequence %s after the second process closed", seq)
	}
}

// helperProcess re-runs the test binary as a second process that opens
// img (writable when mode is "writable") and prints what happened.
func helperProcess(t *testing.T, img, mode string) (string, error) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestMMPHelperProcess$", "-test.v")
	cmd.Env = append(os.Environ(), "EXT4IO_MMP_HELPER="+mode+":"+img)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestMMPHelperProcess is the second process of TestMMPSecondWriterRefused.
func TestMMPHelperProcess(t *testing.T) {
	arg := os.Getenv("EXT4IO_MMP_HELPER")
	if arg == "" {
		t.Skip("helper process for TestMMPSecondWriterRefused")
	}
	mode, img, _ := strings.Cut(arg, ":")
	v, err := openDev(img, ext4io.Options{Writable: mode == "writable"})
	switch {
	case errors.Is(err, ext4io.ErrBusy):
		fmt.Printf("refused: busy: %v\n", err)
	case err != nil:
		t.Fatalf("open: %v", err)
	default:
		fmt.Println("opened")
		if err := v.Close(); err != nil {
			t.Fatalf("close: %v", err)
		}
	}
}

// TestMMPFsckRefused: (d) seq FSCK (e2fsck running) refuses writable and
// replaying opens at once, without the wait; read-only opens go on.
func TestMMPFsckRefused(t *testing.T) {
	// A wait far above mmpTestWait, so that a refusal after the wait shows
	// (sequential: SetMMPWait is global).
	defer ext4io.SetMMPWait(time.Minute)()
	img := mkfsMMP(t)
	writeMMPSeq(t, img, 0xF0000000) // unknown, above MMPSeqMax: refused too
	if _, err := openDev(img, ext4io.Options{Writable: true}); !errors.Is(err, ext4io.ErrBusy) || !strings.Contains(err.Error(), "unknown sequence") {
		t.Fatalf("Open with an unknown sequence: %v, want ErrBusy", err)
	}
	writeMMPSeq(t, img, layout.MMPSeqFsck)
	for _, opts := range []ext4io.Options{{Writable: true}, {Replay: true}} {
		start := time.Now()
		_, err := openDev(img, opts)
		if !errors.Is(err, ext4io.ErrBusy) || !strings.Contains(err.Error(), "e2fsck") {
			t.Fatalf("Open(%+v) with seq FSCK: %v, want ErrBusy naming e2fsck", opts, err)
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Fatalf("refusal took %v: it must not wait", d)
		}
	}
	v, err := openDev(img, ext4io.Options{})
	if err != nil {
		t.Fatalf("read-only Open with seq FSCK: %v", err)
	}
	v.Close()
	if _, m := readMMP(t, img); m.Seq != layout.MMPSeqFsck {
		t.Fatalf("refused opens changed the sequence to %#x", m.Seq)
	}
}

// TestMMPStaleSeqTakenOver: a sequence left by a holder that died (not
// CLEAN, not changing) is taken over after the wait.
func TestMMPStaleSeqTakenOver(t *testing.T) {
	t.Parallel()
	img := mkfsMMP(t)
	writeMMPSeq(t, img, 12345)
	start := time.Now()
	v, err := openDev(img, ext4io.Options{Writable: true})
	if err != nil {
		t.Fatalf("writable Open over a stale sequence: %v", err)
	}
	if d := time.Since(start); d < 2*mmpTestWait {
		t.Errorf("Open took %v, want two waits (%v)", d, 2*mmpTestWait)
	}
	require.NoError(t, v.Close())
	if _, m := readMMP(t, img); m.Seq != layout.MMPSeqClean {
		t.Fatalf("sequence %#x after Close", m.Seq)
	}
}

// TestMMPLinuxMounted: (c) while Linux has the image mounted read-write
// (its kmmpd updating the block every second), writable opens are
// refused; after umount they succeed and e2fsck is clean.
func TestMMPLinuxMounted(t *testing.T) {
	t.Parallel()
	img := mkfsMMP(t)
	mnt := e2fs.Mount(t, img, false) // the kernel's own MMP wait: about 11 s
	require.NoError(t, os.WriteFile(filepath.Join(mnt, "linux"), []byte("written by Linux\n"), 0o644))
	_, err := openDev(img, ext4io.Options{Writable: true})
	if !errors.Is(err, ext4io.ErrBusy) {
		t.Fatalf("writable Open while Linux has it mounted: %v, want ErrBusy", err)
	}
	t.Logf("refused: %v", err)
	e2fs.Unmount(t, mnt)
	if seq := debugfsMMPSeq(t, img); seq != "ff4d4d50" {
		t.Fatalf("sequence %s after umount", seq)
	}
	v, err := openDev(img, ext4io.Options{Writable: true})
	if err != nil {
		t.Fatalf("writable Open after umount: %v", err)
	}
	require.NoError(t, v.Close())
	e2fs.Fsck(t, img)
	if got := string(e2fs.Dump(t, img, "linux")); got != "written by Linux\n" {
		t.Fatalf("file Linux wrote reads %q", got)
	}
}

// TestFormatMMPLinux: (e) Format with mmp: e2fsck is clean, Linux mounts
// it read-write and leaves it clean, and ext4io opens it writable.
func TestFormatMMPLinux(t *testing.T) {
	t.Parallel()
	img := filepath.Join(t.TempDir(), "fmt.img")
	dev, err := blockdev.CreateFile(img, 64<<20)
	require.NoError(t, err)
	require.NoError(t, ext4io.Format(dev, ext4io.FormatOptions{Features: "mmp", MMPUpdateInterval: 1}))
	dev.Close()
	e2fs.Fsck(t, img)
	if seq := debugfsMMPSeq(t, img); seq != "ff4d4d50" {
		t.Fatalf("sequence %s after Format", seq)
	}
	v, err := openDev(img, ext4io.Options{Writable: true})
	if err != nil {
		t.Fatalf("writable Open of a formatted mmp image: %v", err)
	}
	f, err := v.Create("from-ext4io")
	require.NoError(t, err)
	if _, err := f.WriteAt([]byte("hello\n"), 0); err != nil {
		t.Fatal(err)
	}
	f.Close()
	require.NoError(t, v.Close())
	e2fs.Fsck(t, img)
	mnt := e2fs.Mount(t, img, false)
	got, err := os.ReadFile(filepath.Join(mnt, "from-ext4io"))
	if err != nil || string(got) != "hello\n" {
		t.Fatalf("Linux reads %q, %v", got, err)
	}
	e2fs.Unmount(t, mnt)
	e2fs.Fsck(t, img)
	if seq := debugfsMMPSeq(t, img); seq != "ff4d4d50" {
		t.Fatalf("sequence %s after Linux's umount", seq)
	}
}

// TestMMPTakenOverWhileOpen: when the updater finds another node's
// sequence in the block, the volume stops writing (ErrBusy, like the
// kernel's ext4_error from kmmpd) and Close leaves the block and the
// superblock alone.
func TestMMPTakenOverWhileOpen(t *testing.T) {
	// Sequential: SetMMPRecheck is global, and the other tests' holders
	// must not re-read their blocks.
	defer ext4io.SetMMPRecheck(time.Nanosecond)()
	img := mkfsMMP(t)
	v, err := openDev(img, ext4io.Options{Writable: true})
	require.NoError(t, err)
	f, err := v.Create("file")
	require.NoError(t, err)
	deadline := time.Now().Add(10 * time.Second)
	for {
		sb, m := readMMP(t, img)
		m.Seq = 777
		m.SetNames("other-node", "sdz")
		m.SetChecksum(sb.MetadataCsum(), sb.CsumSeed())
		fd, err := os.OpenFile(img, os.O_RDWR, 0)
		require.NoError(t, err)
		fd.WriteAt(m.Raw[:], int64(sb.MmpBlock)*int64(sb.BlockSize()))
		fd.Close()
		time.Sleep(300 * time.Millisecond)
		_, err = f.WriteAt([]byte("x"), 0)
		if errors.Is(err, ext4io.ErrBusy) {
			if !errors.Is(err, ext4io.ErrReadOnly) {
				t.Errorf("write after take-over: %v, want ErrReadOnly too", err)
			}
			t.Logf("write refused: %v", err)
			break
		}
		if err != nil {
			t.Fatalf("write: %v", err)
		}
		if time.Now().After(deadline) {
			t.Fatal("the updater did not notice another node's sequence")
		}
	}
	if err := v.Sync(); !errors.Is(err, ext4io.ErrBusy) {
		t.Errorf("Sync after take-over: %v, want ErrBusy (no more commits)", err)
	}
	f.Close()
	if err := v.Close(); !errors.Is(err, ext4io.ErrBusy) {
		t.Fatalf("Close after take-over: %v, want ErrBusy", err)
	}
	if _, m := readMMP(t, img); m.Seq != 777 || m.NodenameString() != "other-node" {
		t.Fatalf("Close overwrote the other node's block: seq %#x node %q", m.Seq, m.NodenameString())
	}
}

// TestMMPSharedDiskLoop: two paths to one disk, as two hosts on shared
// storage have: a Volume on the image file holds it, and a writable Open
// through a loop device on the same file (whose page cache does not see
// the file's writes) is refused, because MMP reads bypass that cache.
func TestMMPSharedDiskLoop(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("loop devices need root")
	}
	t.Parallel()
	img := mkfsMMP(t)
	out, err := exec.Command("losetup", "--find", "--show", img).CombinedOutput()
	if err != nil {
		t.Skipf("cannot attach a loop device: %v: %s", err, out)
	}
	loop := strings.TrimSpace(string(out))
	defer exec.Command("losetup", "--detach", loop).Run()

	v, err := openDev(img, ext4io.Options{Writable: true})
	require.NoError(t, err)
	_, err = openDev(loop, ext4io.Options{Writable: true})
	if !errors.Is(err, ext4io.ErrBusy) {
		t.Fatalf("writable Open through %s while the file is held: %v, want ErrBusy", loop, err)
	}
	require.NoError(t, v.Close())
}

// TestMMPLinuxRefusedWhileOpen: while ext4io holds the image, Linux's own
// MMP check refuses to mount it read-write (after its 11 s wait), and
// mounts it once ext4io has closed.
func TestMMPLinuxRefusedWhileOpen(t *testing.T) {
	if testing.Short() {
		t.Skip("mount tests skipped in -short mode")
	}
	if os.Geteuid() != 0 {
		t.Skip("mounting needs root")
	}
	t.Parallel()
	img := mkfsMMP(t)
	v, err := openDev(img, ext4io.Options{Writable: true})
	require.NoError(t, err)
	defer v.Close()
	dir := t.TempDir()
	out, err := exec.Command("mount", "-o", "loop", "-t", "ext4", img, dir).CombinedOutput()
	if err == nil {
		exec.Command("umount", dir).Run()
		t.Fatal("Linux mounted the image while ext4io held it")
	}
	t.Logf("mount refused: %v: %s", err, bytes.TrimSpace(out))
	// A failed loop mount may leave its loop device attached.
	lo, _ := exec.Command("losetup", "-j", img).Output()
	for _, line := range strings.Split(string(lo), "\n") {
		if dev, _, ok := strings.Cut(line, ":"); ok && strings.HasPrefix(dev, "/dev/loop") {
			exec.Command("losetup", "-d", dev).Run()
		}
	}
	require.NoError(t, v.Close())
	e2fs.Mount(t, img, false)
}
