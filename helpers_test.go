package ext4io_test

import (
	"archive/tar"
	"bytes"
	"compress/bzip2"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev"
	"github.com/ext4io/ext4io/ext4iotest"
	"github.com/ext4io/ext4io/internal/e2fs"
	"github.com/stretchr/testify/require"
)

// Helpers shared by the external tests of several files: images made and
// checked, tools run, loop mounts, bytes compared.

func dumpe2fsHeader(t *testing.T, img string) string {
	t.Helper()
	out, err := exec.Command(e2fs.Tool(t, "dumpe2fs"), "-h", img).CombinedOutput()
	if err != nil {
		t.Fatalf("dumpe2fs: %v\n%s", err, out)
	}
	return string(out)
}

func header(t *testing.T, img, key string) string {
	for _, l := range strings.Split(dumpe2fsHeader(t, img), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok && k == key {
			return strings.TrimSpace(v)
		}
	}
	t.Fatalf("dumpe2fs has no %q", key)
	return ""
}

// formatImage formats a sparse image file with ext4io.Format.
func formatImage(t *testing.T, size int64, opts ext4io.FormatOptions) string {
	t.Helper()
	img := filepath.Join(t.TempDir(), "fmt.img")
	dev, err := blockdev.CreateFile(img, size)
	require.NoError(t, err)
	require.NoError(t, ext4io.Format(dev, opts))
	if err := dev.Close(); err != nil {
		t.Fatal(err)
	}
	return img
}

// fsckOpen checks the closed image img with e2fsck and opens file name of
// it read-only; the volume closes with the test.
func fsckOpen(t *testing.T, img, name string) *ext4io.File {
	t.Helper()
	e2fs.Fsck(t, img)
	ro, err := ext4io.OpenImage(img, ext4io.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { ro.Close() })
	f, err := ro.Open(name)
	require.NoError(t, err)
	return f
}

// readBlocks returns n blocks at blk of img.
func readBlocks(t *testing.T, img string, blk, n uint64) []byte {
	t.Helper()
	f, err := os.Open(img)
	require.NoError(t, err)
	defer f.Close()
	b := make([]byte, n*4096)
	if _, err := f.ReadAt(b, int64(blk)*4096); err != nil {
		t.Fatal(err)
	}
	return b
}

func writeBlock(t *testing.T, img string, blk uint64, b []byte) {
	t.Helper()
	f, err := os.OpenFile(img, os.O_RDWR, 0)
	require.NoError(t, err)
	defer f.Close()
	if _, err := f.WriteAt(b, int64(blk)*4096); err != nil {
		t.Fatal(err)
	}
}

// saveDev writes a device's contents to a new image file.
func saveDev(t *testing.T, dev blockdev.Device, path string) {
	t.Helper()
	saveSparse(t, dev, dev.Size(), path)
}

// saveSparse writes size bytes of r to a new file at path, leaving holes
// where r has zeros (the file reads the same, but the many image copies
// of the crash and damage tests do not fill the disk and page cache).
func saveSparse(t *testing.T, r io.ReaderAt, size int64, path string) {
	t.Helper()
	f, err := os.Create(path)
	require.NoError(t, err)
	defer f.Close()
	buf := make([]byte, 64<<10)
	zero := make([]byte, len(buf))
	for off := int64(0); off < size; off += int64(len(buf)) {
		b := buf[:min(int64(len(buf)), size-off)]
		if _, err := r.ReadAt(b, off); err != nil && !(err == io.EOF && off+int64(len(b)) == size) {
			t.Fatal(err)
		}
		if bytes.Equal(b, zero[:len(b)]) {
			continue
		}
		if _, err := f.WriteAt(b, off); err != nil {
			t.Fatal(err)
		}
	}
	require.NoError(t, f.Truncate(size))
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// keepOnFailure arranges that, if t fails, the files named (name in the
// kept directory -> path now) are copied into a new directory under
// os.TempDir() whose name starts with prefix, and the directory is
// logged: one directory per run (os.MkdirTemp), so that runs at once (CI,
// -count=2) do not overwrite each other's images. It runs as a cleanup
// registered after the files' t.TempDir, so before their removal, and
// also when the test stops with t.Fatal. Files missing then are left out.
func keepOnFailure(t *testing.T, prefix string, files map[string]string) {
	t.Helper()
	t.Cleanup(func() {
		if t.Failed() {
			keepFiles(t, prefix, files)
		}
	})
}

// keepFiles copies files into a new directory under os.TempDir() named
// after prefix (a test name's "/" made "-") and returns it ("" when it
// cannot make one).
func keepFiles(t *testing.T, prefix string, files map[string]string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", strings.ReplaceAll(prefix, "/", "-")+"-")
	if err != nil {
		t.Logf("failing images not kept: %v", err)
		return ""
	}
	for name, src := range files {
		f, err := os.Open(src)
		if err != nil {
			continue // not made before the failure
		}
		if st, err := f.Stat(); err == nil {
			saveSparse(t, f, st.Size(), filepath.Join(dir, name))
		}
		f.Close()
	}
	t.Logf("failing images kept in %s", dir)
	return dir
}

// guarded runs fn in a goroutine with recover and a deadline. It reports
// a panic (with stack) or a timeout as a test error naming label, and
// returns false in both cases.
func guarded(t testing.TB, label string, deadline time.Duration, fn func()) bool {
	t.Helper()
	done := make(chan string, 1)
	go func() {
		defer func() {
			if r := recover(); r != nil {
				done <- fmt.Sprintf("panic: %v\n%s", r, debug.Stack())
				return
			}
			done <- ""
		}()
		fn()
	}()
	select {
	case msg := <-done:
		if msg != "" {
			t.Errorf("%s: %s", label, msg)
			return false
		}
		return true
	case <-time.After(deadline):
		t.Errorf("%s: no result after %v (hang?)", label, deadline)
		return false
	}
}

// findTestdata walks up from the working directory to
// shared/testdata/e2fsprogs, or skips t.
func findTestdata(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	require.NoError(t, err)
	for {
		p := filepath.Join(dir, "shared", "testdata", "e2fsprogs")
		if st, err := os.Stat(p); err == nil && st.IsDir() {
			return p
		}
		up := filepath.Dir(dir)
		if up == dir {
			t.Skip("shared/testdata/e2fsprogs not found above the working directory")
		}
		dir = up
	}
}

// writeSparse copies r to a new file at path, leaving all-zero 4 KiB
// chunks as holes (the j_long_* images are 256 MiB of mostly zeroes).
func writeSparse(path string, r io.Reader) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	buf := make([]byte, 4096)
	zero := make([]byte, 4096)
	var off int64
	for {
		n, err := io.ReadFull(r, buf)
		if n > 0 {
			if !bytes.Equal(buf[:n], zero[:n]) {
				if _, werr := f.WriteAt(buf[:n], off); werr != nil {
					return werr
				}
			}
			off += int64(n)
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			break
		}
		if err != nil {
			return err
		}
	}
	return f.Truncate(off)
}

// unpackImage decompresses a test image (.gz, .bz2, or the file-system
// member of a .tar.bz2) to dst. It runs gzip/bzip2 when installed: the
// stdlib decompressors are slow under -race on the 128 MiB images.
func unpackImage(src, dst string) error {
	tool := "gzip"
	if strings.HasSuffix(src, ".bz2") {
		tool = "bzip2"
	}
	var r io.Reader
	if path, err := exec.LookPath(tool); err == nil {
		cmd := exec.Command(path, "-dc", src)
		out, err := cmd.StdoutPipe()
		if err != nil {
			return err
		}
		if err := cmd.Start(); err != nil {
			return err
		}
		defer cmd.Wait()
		defer io.Copy(io.Discard, out)
		r = out
	} else {
		f, err := os.Open(src)
		if err != nil {
			return err
		}
		defer f.Close()
		if tool == "bzip2" {
			r = bzip2.NewReader(f)
		} else if r, err = gzip.NewReader(f); err != nil {
			return err
		}
	}
	if strings.HasSuffix(src, ".tar.bz2") {
		tr := tar.NewReader(r)
		for {
			h, err := tr.Next()
			if err != nil {
				return fmt.Errorf("%s: no file-system member: %w", src, err)
			}
			if n := filepath.Base(h.Name); n == "image" || strings.HasSuffix(n, ".img") {
				r = tr
				break
			}
		}
	}
	return writeSparse(dst, r)
}

func exitCode(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}

func firstDiff(a, b []byte) int {
	if bytes.Equal(a, b) {
		return -1
	}
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	if len(a) != len(b) {
		return min(len(a), len(b))
	}
	return -1
}

func randBytes(rng *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

// fileACL returns the "File ACL:" block debugfs reports for path.
func fileACL(t *testing.T, img, path string) string {
	t.Helper()
	out := e2fs.Debugfs(t, img, false, "stat "+path)
	i := strings.Index(out, "File ACL: ")
	if i < 0 {
		t.Fatalf("debugfs stat %s: no File ACL line:\n%s", path, out)
	}
	return strings.Fields(out[i+len("File ACL: "):])[0]
}

// lookTool returns the path of a command or skips t naming its package.
func lookTool(t *testing.T, name, pkg string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Skipf("%s not installed (apt-get install %s)", name, pkg)
	}
	return p
}

func run(t *testing.T, name string, args ...string) {
	t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
	}
}

// mountLoop mounts img on a new directory and registers its unmount (and
// loop-device detach) with t.Cleanup. It skips t when mounting is not
// possible here.
func mountLoop(t *testing.T, img string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mount -o loop needs root")
	}
	mnt := filepath.Join(t.TempDir(), "mnt")
	require.NoError(t, os.Mkdir(mnt, 0o755))
	if out, err := exec.Command("mount", "-o", "loop", "-t", "ext4", img, mnt).CombinedOutput(); err != nil {
		t.Skipf("mount -o loop does not work here: %v: %s", err, strings.TrimSpace(string(out)))
	}
	t.Cleanup(func() { umount(t, mnt, img) }) // a no-op after an explicit umount
	return mnt
}

// umount unmounts mnt (retrying a busy mount once lazily) and detaches any
// loop device still bound to img.
func umount(t *testing.T, mnt, img string) {
	t.Helper()
	if out, err := ext4iotest.UmountRetry(mnt); err != nil {
		if !bytes.Contains(out, []byte("not mounted")) {
			t.Errorf("umount %s: %v: %s", mnt, err, out)
			exec.Command("umount", "-l", mnt).Run()
		}
	}
	out, _ := exec.Command("losetup", "-j", img).Output()
	for _, line := range strings.Split(string(out), "\n") {
		if dev, _, ok := strings.Cut(line, ":"); ok && strings.HasPrefix(dev, "/dev/loop") {
			exec.Command("losetup", "-d", dev).Run()
		}
	}
}

func openOSVolume(t *testing.T) (*ext4io.Volume, string) {
	t.Helper()
	img := formatImage(t, 32<<20, ext4io.FormatOptions{})
	v, err := ext4io.OpenImage(img, ext4io.Options{Writable: true})
	require.NoError(t, err)
	return v, img
}

// openWritableWithFile opens a formatted image writable and creates "f"
// holding 8 KiB.
func openWritableWithFile(t *testing.T) (string, *ext4io.Volume, *ext4io.File) {
	t.Helper()
	img := formatImage(t, 32<<20, ext4io.FormatOptions{})
	v, err := ext4io.OpenImage(img, ext4io.Options{Writable: true})
	require.NoError(t, err)
	f, err := v.Create("f")
	require.NoError(t, err)
	if _, err := f.WriteAt(make([]byte, 8192), 0); err != nil {
		t.Fatal(err)
	}
	return img, v, f
}

// directFile creates name, fallocates size bytes of it in mode and opens
// it with O_DIRECT.
func directFile(b testing.TB, v *ext4io.Volume, name string, mode ext4io.FallocMode, size int64) *ext4io.File {
	b.Helper()
	f, err := v.Create(name)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if err := f.Fallocate(mode, 0, size); err != nil {
		b.Fatal(err)
	}
	d, err := v.OpenFile(name, os.O_RDWR|ext4io.O_DIRECT, 0)
	if err != nil {
		b.Fatal(err)
	}
	return d
}

// sized picks a test's size: short under -short, long when EXT4IO_LONG is
// set (and not -short), else def. The default keeps the package's
// go test -race near 9 minutes on a 2-CPU machine; EXT4IO_LONG=1 runs the
// long tests at full size (more steps, seeds and operations), as
// docs/testing.md describes.
func sized(short, def, long int) int {
	switch {
	case testing.Short():
		return short
	case os.Getenv("EXT4IO_LONG") != "":
		return long
	}
	return def
}

// digestOf returns the xxhash digest of r's bytes and how many there
// were, read through a 64 KiB buffer: a file compared with a model
// without a second copy of its contents.
func digestOf(r io.Reader) (uint64, int64, error) {
	h := xxhash.New()
	n, err := io.CopyBuffer(h, r, make([]byte, 64<<10))
	return h.Sum64(), n, err
}

// TestKeepFilesUnique: two runs of one test keep their failing images in
// directories of their own (a fixed /tmp/<prefix> path made the second
// run overwrite the first's), named after the test with "/" replaced.
func TestKeepFilesUnique(t *testing.T) {
	src := filepath.Join(t.TempDir(), "img")
	var dirs []string
	for i := range 2 {
		require.NoError(t, os.WriteFile(src, []byte{byte(i)}, 0o644))
		dir := keepFiles(t, "keep-"+t.Name()+"/sub", map[string]string{"crash.img": src, "missing.img": src + ".none"})
		require.NotEmpty(t, dir)
		t.Cleanup(func() { os.RemoveAll(dir) })
		require.Equal(t, os.TempDir(), filepath.Dir(dir))
		require.True(t, strings.HasPrefix(filepath.Base(dir), "keep-TestKeepFilesUnique-sub-"), dir)
		dirs = append(dirs, dir)
	}
	require.NotEqual(t, dirs[0], dirs[1])
	for i, dir := range dirs {
		b, err := os.ReadFile(filepath.Join(dir, "crash.img"))
		require.NoError(t, err)
		require.Equal(t, []byte{byte(i)}, b, "run %d's image", i)
		_, err = os.Stat(filepath.Join(dir, "missing.img"))
		require.ErrorIs(t, err, os.ErrNotExist)
	}
}
