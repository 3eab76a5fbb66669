package ext4io_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/internal/e2fs"
)

// TestOSMknodRename2: special files in both device-number encodings, and
// RENAME_EXCHANGE of a directory and a file across parents; e2fsck is
// clean, debugfs and Linux read the device numbers we wrote, and the link
// counts and ".." entries follow the exchange.
func TestOSMknodRename2(t *testing.T) {
	v, img := openOSVolume(t)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(v.Mknod("fifo", fs.ModeNamedPipe|0o640, 0))
	must(v.Mknod("sock", fs.ModeSocket|0o600, 0))
	must(v.Mknod("null", fs.ModeDevice|fs.ModeCharDevice|0o666, ext4io.Mkdev(1, 3)))
	must(v.Mknod("nvme", fs.ModeDevice|0o660, ext4io.Mkdev(259, 70000)))
	if err := v.Mknod("null", fs.ModeNamedPipe, 0); !errors.Is(err, syscall.EEXIST) {
		t.Fatalf("mknod over a name: %v", err)
	}
	fi, err := v.Stat("nvme")
	must(err)
	if fi.Mode() != fs.ModeDevice|0o660 || fi.Rdev != ext4io.Mkdev(259, 70000) {
		t.Fatalf("nvme: %v rdev %#x", fi.Mode(), fi.Rdev)
	}

	must(v.MkdirAll("p/d/sub", 0o755))
	must(v.MkdirAll("q", 0o755))
	must(v.WriteFile("q/f", []byte("file"), 0o644))
	if err := v.Rename2("p/d", "q/f", ext4io.RENAME_NOREPLACE); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("RENAME_NOREPLACE over a file: %v", err)
	}
	if err := v.Rename2("p/d", "q/none", ext4io.RENAME_EXCHANGE); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("RENAME_EXCHANGE with a missing name: %v", err)
	}
	if err := v.Rename2("p", "p/d/sub", ext4io.RENAME_EXCHANGE); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("RENAME_EXCHANGE of an ancestor: %v", err)
	}
	must(v.Rename2("p/d", "q/f", ext4io.RENAME_EXCHANGE))
	if b, err := v.ReadFile("p/d"); err != nil || string(b) != "file" {
		t.Fatalf("p/d after the exchange: %q, %v", b, err)
	}
	for name, want := range map[string]uint16{"p": 2, "q": 3, "q/f": 3} {
		fi, err := v.Stat(name)
		must(err)
		if fi.Nlink != want {
			t.Errorf("%s: nlink %d, want %d", name, fi.Nlink, want)
		}
	}
	must(v.Rename2("q/f/sub", "q/g", ext4io.RENAME_NOREPLACE))
	st, err := v.Statfs()
	must(err)
	must(v.Close())
	e2fs.Fsck(t, img)
	out := e2fs.Debugfs(t, img, false, "stat nvme")
	if !strings.Contains(out, "Device major/minor number: 259:70000") {
		t.Errorf("debugfs stat nvme:\n%s", out)
	}
	out = e2fs.Debugfs(t, img, false, "stat null")
	if !strings.Contains(out, "Device major/minor number: 01:03") {
		t.Errorf("debugfs stat null:\n%s", out)
	}
	mnt := mountLoop(t, img)
	for name, want := range map[string]uint64{"null": ext4io.Mkdev(1, 3), "nvme": ext4io.Mkdev(259, 70000)} {
		fi, err := os.Lstat(filepath.Join(mnt, name))
		must(err)
		if rdev := fi.Sys().(*syscall.Stat_t).Rdev; rdev != want {
			t.Errorf("Linux: %s rdev %#x, want %#x", name, rdev, want)
		}
	}
	for name, mode := range map[string]fs.FileMode{"fifo": fs.ModeNamedPipe | 0o640, "sock": fs.ModeSocket | 0o600} {
		fi, err := os.Lstat(filepath.Join(mnt, name))
		must(err)
		if fi.Mode() != mode {
			t.Errorf("Linux: %s mode %v, want %v", name, fi.Mode(), mode)
		}
	}
	if b, err := os.ReadFile(filepath.Join(mnt, "p/d")); err != nil || string(b) != "file" {
		t.Errorf("Linux: p/d %q, %v", b, err)
	}
	var sfs syscall.Statfs_t
	must(syscall.Statfs(mnt, &sfs))
	if int64(sfs.Bsize) != st.BlockSize || sfs.Blocks != st.Blocks || sfs.Files != st.Files || sfs.Ffree != st.FilesFree || sfs.Bfree != st.BlocksFree || sfs.Bavail != st.BlocksAvail {
		t.Errorf("statfs: Linux %+v, ext4io %+v", sfs, st)
	}
}

// TestOSStatfs: Statfs of images mkfs.ext4 made (many groups, sparse
// superblock backups, reserved GDT blocks, meta_bg) equals what Linux's
// statfs reports once the image is mounted.
func TestOSStatfs(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"1k", []string{"-b", "1024"}},
		{"4k", []string{"-b", "4096"}},
		{"meta_bg", []string{"-b", "1024", "-O", "meta_bg,^resize_inode"}},
		{"no-journal", []string{"-b", "4096", "-O", "^has_journal"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			img := filepath.Join(t.TempDir(), "mkfs.img")
			e2fs.Mkfs(t, img, "300M", tc.args...)
			for _, writable := range []bool{false, true} {
				v, err := ext4io.OpenImage(img, ext4io.Options{Writable: writable})
				if err != nil {
					t.Fatal(err)
				}
				st, err := v.Statfs()
				if err != nil {
					t.Fatal(err)
				}
				if err := v.Close(); err != nil {
					t.Fatal(err)
				}
				mnt := mountLoop(t, img)
				var sfs syscall.Statfs_t
				if err := syscall.Statfs(mnt, &sfs); err != nil {
					t.Fatal(err)
				}
				umount(t, mnt, img)
				if sfs.Blocks != st.Blocks || sfs.Bfree != st.BlocksFree || sfs.Bavail != st.BlocksAvail || sfs.Files != st.Files || sfs.Ffree != st.FilesFree {
					t.Errorf("writable %v: Linux blocks %d free %d avail %d files %d ffree %d; ext4io %+v",
						writable, sfs.Blocks, sfs.Bfree, sfs.Bavail, sfs.Files, sfs.Ffree, st)
				}
			}
		})
	}
}
