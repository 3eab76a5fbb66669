package ext4iotest

// The e2fsprogs oracles (moved here from internal/e2fs, which forwards).

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ext4io/ext4io/blockdev"
)

// Tool returns the path of an e2fsprogs binary, or skips t.
func Tool(t testing.TB, name string) string {
	t.Helper()
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	for _, dir := range []string{"/usr/sbin", "/sbin"} {
		p := filepath.Join(dir, name)
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	t.Skipf("%s not installed (e2fsprogs); .ci/run installs it", name) // one line
	return ""
}

// Mkfs creates an ext4 image of the given size at img with mkfs.ext4 and
// extra arguments (for example "-b", "1024", "-d", dir).
func Mkfs(t testing.TB, img, size string, args ...string) {
	t.Helper()
	MkfsConf(t, "", img, size, args...)
}

// MkfsConf is Mkfs with MKE2FS_CONFIG set to conf (if not empty).
func MkfsConf(t testing.TB, conf, img, size string, args ...string) {
	t.Helper()
	a := append([]string{"-q", "-F"}, args...)
	a = append(a, img, size)
	cmd := exec.Command(Tool(t, "mkfs.ext4"), a...)
	if conf != "" {
		cmd.Env = append(os.Environ(), "MKE2FS_CONFIG="+conf)
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("mkfs.ext4 %s: %v\n%s", strings.Join(a, " "), err, out)
	}
}

// Fsck runs e2fsck -fn on img and fails t unless it reports a clean
// filesystem. It returns the output.
func Fsck(t testing.TB, img string) string {
	t.Helper()
	out, err := exec.Command(Tool(t, "e2fsck"), "-fn", img).CombinedOutput()
	if err != nil {
		t.Fatalf("e2fsck -fn %s: %v\n%s", img, err, out)
	}
	return string(out)
}

// FsckDev copies dev's contents to a temporary image and runs Fsck on it,
// for images on an in-memory device. It returns e2fsck's output.
func FsckDev(t testing.TB, dev blockdev.Device) string {
	t.Helper()
	Tool(t, "e2fsck") // skip before copying
	return Fsck(t, ImageOf(t, dev))
}

// ImageOf copies dev's contents to a new file in t.TempDir and returns its
// path, for the e2fsprogs tools and Mount.
func ImageOf(t testing.TB, dev blockdev.Device) string {
	t.Helper()
	img := filepath.Join(t.TempDir(), "image")
	f, err := os.Create(img)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := io.Copy(f, io.NewSectionReader(dev, 0, dev.Size())); err != nil {
		t.Fatalf("copying the device to %s: %v", img, err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return img
}

// Debugfs runs debugfs with the given request (-R) on img, read-only
// unless write is set, and returns stdout.
func Debugfs(t testing.TB, img string, write bool, request string) string {
	t.Helper()
	args := []string{"-R", request, img}
	if write {
		args = append([]string{"-w"}, args...)
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(Tool(t, "debugfs"), args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("debugfs %s: %v\n%s", request, err, stderr.String())
	}
	return stdout.String()
}

// DebugfsScript runs a debugfs command file (one request per line) on img.
func DebugfsScript(t testing.TB, img string, write bool, lines []string) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "debugfs.cmds")
	if err := os.WriteFile(f, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"-f", f, img}
	if write {
		args = append([]string{"-w"}, args...)
	}
	out, err := exec.Command(Tool(t, "debugfs"), args...).CombinedOutput()
	if err != nil {
		t.Fatalf("debugfs -f: %v\n%s", err, out)
	}
	return string(out)
}

// ExtentLine is one row of debugfs's "ex" output.
type ExtentLine struct {
	Level, Depth       int
	Logical, LogicalTo uint64
	Physical           uint64
	Length             uint64
	Unwritten          bool
	Leaf               bool // a leaf entry (an extent), not an index entry
}

// Extents parses `debugfs -R "ex FILE"` output into its rows.
func Extents(t testing.TB, img, file string) []ExtentLine {
	t.Helper()
	out := Debugfs(t, img, false, "ex "+file)
	var rows []ExtentLine
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(strings.NewReplacer("/", " ", "-", " ", "Uninit", "UNINIT").Replace(line))
		// Level Entries Logical Physical Length Flags, e.g.
		//  0/ 1   1/  1     0 -    99  1234 -  1333    100 Uninit
		if len(f) < 8 { // index rows have 8 fields, leaf rows 9 (10 with a flag)
			continue
		}
		var r ExtentLine
		var lvl, depth, ent, ents int
		if _, err := fmt.Sscan(strings.Join(f[:4], " "), &lvl, &depth, &ent, &ents); err != nil {
			continue
		}
		r.Level, r.Depth = lvl, depth
		r.Leaf = lvl == depth
		if _, err := fmt.Sscan(f[4], &r.Logical); err != nil {
			continue
		}
		fmt.Sscan(f[5], &r.LogicalTo)
		fmt.Sscan(f[6], &r.Physical)
		rest := f[7:]
		if r.Leaf {
			// physical range then length
			if len(rest) >= 2 {
				fmt.Sscan(rest[1], &r.Length)
			}
		} else if len(rest) >= 1 {
			fmt.Sscan(rest[0], &r.Length)
		}
		for _, w := range rest {
			if w == "UNINIT" {
				r.Unwritten = true
			}
		}
		rows = append(rows, r)
	}
	return rows
}

// Dump returns the bytes of file in img as `debugfs -R "dump FILE OUT"`
// reads them.
func Dump(t testing.TB, img, file string) []byte {
	t.Helper()
	out := filepath.Join(t.TempDir(), "dump")
	Debugfs(t, img, false, fmt.Sprintf("dump %s %s", file, out))
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatalf("debugfs dump %s: %v", file, err)
	}
	return b
}

// Leaves returns the leaf rows (the extents) of `debugfs -R "ex FILE"`
// and the tree depth debugfs reports (0 when the inode holds the extents).
func Leaves(t testing.TB, img, file string) (leaves []ExtentLine, depth int) {
	t.Helper()
	for _, r := range Extents(t, img, file) {
		depth = max(depth, r.Depth)
		if r.Leaf {
			leaves = append(leaves, r)
		}
	}
	return leaves, depth
}

// TreeBlocks returns the physical blocks of file's extent tree below the
// inode (the blocks that index rows of `debugfs -R "ex FILE"` point to),
// which Extents leaves out. An index row reads
// "Level/Depth Entry/Entries Lblk - LblkEnd Pblk Length".
func TreeBlocks(t testing.TB, img, file string) []uint64 {
	t.Helper()
	var blks []uint64
	for _, line := range strings.Split(Debugfs(t, img, false, "ex "+file), "\n") {
		f := strings.Fields(strings.NewReplacer("/", " ", "-", " ").Replace(line))
		if len(f) != 8 {
			continue
		}
		var n [8]uint64
		ok := true
		for i := range f {
			if _, err := fmt.Sscan(f[i], &n[i]); err != nil {
				ok = false
				break
			}
		}
		if ok && n[0] < n[1] {
			blks = append(blks, n[6])
		}
	}
	return blks
}

// Mount loop-mounts img on a new temporary directory (read-only when ro)
// and unmounts it in t.Cleanup. It skips t when not root, in -short mode,
// or when the kernel refuses the mount (for example in a container), saying
// why.
func Mount(t testing.TB, img string, ro bool) string {
	t.Helper()
	if testing.Short() {
		t.Skip("mount tests skipped in -short mode")
	}
	if os.Geteuid() != 0 {
		t.Skip("mounting needs root")
	}
	dir := t.TempDir()
	opts := "loop"
	if ro {
		opts += ",ro"
	}
	out, err := exec.Command("mount", "-o", opts, "-t", "ext4", img, dir).CombinedOutput()
	if err != nil {
		t.Skipf("mount -o %s not allowed here: %v: %s", opts, err, bytes.TrimSpace(out))
	}
	t.Cleanup(func() { Unmount(t, dir) })
	return dir
}

// Unmount unmounts dir if it is mounted (idempotent).
func Unmount(t testing.TB, dir string) {
	t.Helper()
	if err := exec.Command("mountpoint", "-q", dir).Run(); err != nil {
		return
	}
	if out, err := UmountRetry(dir); err != nil {
		t.Errorf("umount %s: %v: %s", dir, err, out)
	}
}

// UmountRetry runs umount dir, retrying for up to about 3 s while it says
// the target is busy: a process that another goroutine forks inherits
// the parent's open files until it execs, so a file just closed under dir
// can keep the mount busy for a moment while tests run in parallel.
func UmountRetry(dir string) ([]byte, error) {
	for i := 0; ; i++ {
		out, err := exec.Command("umount", dir).CombinedOutput()
		if err == nil || i == 30 || !bytes.Contains(out, []byte("busy")) {
			return out, err
		}
		time.Sleep(100 * time.Millisecond)
	}
}
