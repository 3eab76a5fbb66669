package ext4io_test

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/internal/e2fs"
	"github.com/ext4io/ext4io/layout"
)

// xattrDump is every attribute of some files: path -> name -> value.
type xattrDump map[string]map[string]string

func (d xattrDump) String() string {
	var b strings.Builder
	for _, p := range slices.Sorted(maps.Keys(d)) {
		fmt.Fprintf(&b, "%s:\n", p)
		for _, n := range slices.Sorted(maps.Keys(d[p])) {
			v := d[p][n]
			if len(v) > 40 {
				v = fmt.Sprintf("%.40q... (%d bytes)", v, len(v))
			} else {
				v = fmt.Sprintf("%q", v)
			}
			fmt.Fprintf(&b, "  %s=%s\n", n, v)
		}
	}
	return b.String()
}

func equalDumps(a, b xattrDump) bool {
	return maps.EqualFunc(a, b, func(x, y map[string]string) bool { return maps.Equal(x, y) })
}

// linuxXattrs runs getfattr -d -m - -e hex on each file under mnt.
func linuxXattrs(t *testing.T, getfattr, mnt string, files []string) xattrDump {
	t.Helper()
	d := xattrDump{}
	for _, f := range files {
		out, err := exec.Command(getfattr, "-h", "-d", "-m", "-", "-e", "hex", "--absolute-names", filepath.Join(mnt, f)).CombinedOutput()
		if err != nil {
			t.Fatalf("getfattr %s: %v: %s", f, err, out)
		}
		m := map[string]string{}
		for _, line := range strings.Split(string(out), "\n") {
			if line == "" || strings.HasPrefix(line, "#") {
				continue
			}
			name, val, _ := strings.Cut(line, "=")
			raw, err := hex.DecodeString(strings.TrimPrefix(val, "0x"))
			if err != nil {
				t.Fatalf("getfattr line %q: %v", line, err)
			}
			m[name] = string(raw)
		}
		d[f] = m
	}
	return d
}

// ext4ioXattrs lists and reads every attribute of each file with ext4io.
func ext4ioXattrs(t *testing.T, v *ext4io.Volume, files []string) xattrDump {
	t.Helper()
	d := xattrDump{}
	for _, f := range files {
		names, err := v.Llistxattr(f)
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]string{}
		for _, n := range names {
			val, err := v.Lgetxattr(f, n)
			if err != nil {
				t.Fatalf("%s %s: %v", f, n, err)
			}
			m[n] = string(val)
		}
		d[f] = m
	}
	return d
}

// TestXattrLinuxMatrix: Linux makes files with no, one, many in-inode,
// external, shared external (refcount > 1) attributes and POSIX ACLs;
// ext4io reads them as getfattr does, then sets, replaces, removes and
// deletes in separate opens, e2fsck -fn clean after each; Linux then
// reads exactly what ext4io reports, including what ext4io created.
func TestXattrLinuxMatrix(t *testing.T) {
	t.Parallel()
	setfattr := lookTool(t, "setfattr", "attr")
	getfattr := lookTool(t, "getfattr", "attr")
	setfacl := lookTool(t, "setfacl", "acl")
	for _, geo := range [][2]string{{"1024", "256"}, {"4096", "256"}, {"4096", "128"}} {
		bs, isz := geo[0], geo[1]
		t.Run("bs"+bs+"-inode"+isz, func(t *testing.T) {
			img := filepath.Join(t.TempDir(), "m.img")
			e2fs.Mkfs(t, img, "32M", "-b", bs, "-I", isz)
			mnt := mountLoop(t, img)
			big := strings.Repeat("L", 600)
			setx := func(f, n, val string) {
				run(t, setfattr, "-h", "-n", n, "-v", val, filepath.Join(mnt, f))
			}
			files := []string{"none", "one", "many", "ext", "shared1", "shared2", "shared3", "acl", "dir", "link"}
			for _, f := range files {
				switch f {
				case "dir":
					os.Mkdir(filepath.Join(mnt, f), 0o755)
				case "link":
					os.Symlink("one", filepath.Join(mnt, f))
				default:
					os.WriteFile(filepath.Join(mnt, f), []byte(f), 0o644)
				}
			}
			setx("one", "user.one", "1")
			for i := range 4 {
				setx("many", fmt.Sprintf("user.m%d", i), fmt.Sprint("v", i))
			}
			setx("many", "trusted.t", "trusted value")
			setx("ext", "user.big", big)
			setx("ext", "user.small", "s")
			setx("ext", "user.big2", strings.Repeat("2", 150))
			setx("ext", "trusted.\xe9t\xe9", "signed-char name")
			setx("ext", "security.sec", "label")
			for _, f := range []string{"shared1", "shared2", "shared3"} {
				setx(f, "user.big", big)
				setx(f, "user.same", "same")
			}
			run(t, setfacl, "-m", "u:1000:rw,g:50:r", filepath.Join(mnt, "acl"))
			run(t, setfacl, "-d", "-m", "u:1000:rwx", filepath.Join(mnt, "dir"))
			setx("link", "trusted.onlink", "l")
			linux := linuxXattrs(t, getfattr, mnt, files)
			umount(t, mnt, img)
			e2fs.Fsck(t, img)
			if a, b := fileACL(t, img, "/shared1"), fileACL(t, img, "/shared2"); a != b || a == "0" {
				t.Logf("Linux did not share the block (%s, %s)", a, b)
			}

			checkLinuxBlock(t, img, "/ext")
			checkLinuxBlock(t, img, "/shared1")

			step := func(name string, fn func(v *ext4io.Volume)) {
				t.Helper()
				v, err := ext4io.OpenImage(img, ext4io.Options{Writable: true})
				if err != nil {
					t.Fatal(err)
				}
				fn(v)
				if err := v.Close(); err != nil {
					t.Fatal(err)
				}
				t.Logf("after %s", name)
				e2fs.Fsck(t, img)
			}
			must := func(err error) {
				t.Helper()
				if err != nil {
					t.Fatal(err)
				}
			}
			var want xattrDump
			step("read", func(v *ext4io.Volume) {
				if got := ext4ioXattrs(t, v, files); !equalDumps(got, linux) {
					t.Fatalf("ext4io reads\n%v\nLinux reads\n%v", got, linux)
				}
			})
			step("set", func(v *ext4io.Volume) {
				must(v.Setxattr("none", "user.new", []byte("from ext4io"), ext4io.XATTR_CREATE))
				must(v.Setxattr("one", "user.two", []byte("2"), 0))
				must(v.Setxattr("many", "user.big", []byte(strings.Repeat("E", 500)), 0))
				must(v.Setxattr("shared1", "user.added", []byte("copy on write"), 0))
				must(v.Lsetxattr("link", "trusted.onlink2", []byte("l2"), 0))
				f, err := v.Create("new")
				must(err)
				must(f.Setxattr("user.fresh", []byte("fresh"), 0))
				must(f.Setxattr("user.bigfresh", []byte(strings.Repeat("F", 700)), 0))
				must(f.Close())
				// Many entries of mixed name lengths in one block: Linux's
				// sorted lookup finds each.
				f, err = v.Create("manyblock")
				must(err)
				for i := range 14 {
					n := fmt.Sprintf("user.%s%d", strings.Repeat("n", i%5), i)
					must(f.Setxattr(n, []byte(strings.Repeat(string(rune('a'+i)), 10+i*3)), 0))
				}
				must(f.Setxattr("security.z", []byte("sec"), 0))
				must(f.Close())
				// The set of Linux's shared block: ext4io shares it too.
				f, err = v.Create("joins")
				must(err)
				must(f.Setxattr("user.big", []byte(big), 0))
				must(f.Setxattr("user.same", []byte("same"), 0))
				must(f.Close())
				acl := layout.EncodeACLXattr([]layout.ACLEntry{
					{Tag: layout.ACLUserObj, Perm: 6, ID: layout.ACLUndefinedID},
					{Tag: layout.ACLUser, Perm: 4, ID: 1234},
					{Tag: layout.ACLGroupObj, Perm: 4, ID: layout.ACLUndefinedID},
					{Tag: layout.ACLMask, Perm: 4, ID: layout.ACLUndefinedID},
					{Tag: layout.ACLOther, Perm: 0, ID: layout.ACLUndefinedID}})
				must(v.Setxattr("new", "system.posix_acl_access", acl, 0))
			})
			step("replace", func(v *ext4io.Volume) {
				must(v.Setxattr("one", "user.one", []byte("one replaced"), ext4io.XATTR_REPLACE))
				must(v.Setxattr("ext", "user.big", []byte(strings.Repeat("R", 300)), ext4io.XATTR_REPLACE))
				must(v.Setxattr("shared2", "user.same", []byte("different now"), ext4io.XATTR_REPLACE))
			})
			step("remove", func(v *ext4io.Volume) {
				must(v.Removexattr("many", "user.m1"))
				must(v.Removexattr("ext", "user.big"))
				must(v.Removexattr("acl", "system.posix_acl_access"))
				must(v.Lremovexattr("link", "trusted.onlink"))
			})
			if a, b := fileACL(t, img, "/joins"), fileACL(t, img, "/shared3"); a != b {
				t.Errorf("ext4io did not share Linux's block: joins %s, shared3 %s", a, b)
			}
			files = append(files, "new", "joins", "manyblock")
			step("delete", func(v *ext4io.Volume) {
				must(v.Unlink("shared3"))
				must(v.Rename("ext", "shared1")) // over a file whose block was copied
				files = slices.DeleteFunc(files, func(f string) bool { return f == "shared3" || f == "ext" })
				want = ext4ioXattrs(t, v, files)
			})
			mnt = mountLoop(t, img)
			if got := linuxXattrs(t, getfattr, mnt, files); !equalDumps(got, want) {
				t.Fatalf("Linux reads\n%v\next4io wrote\n%v", got, want)
			}
			// The access ACL set the permission bits (mask r-- as group).
			if fi, err := os.Stat(filepath.Join(mnt, "new")); err != nil || fi.Mode().Perm() != 0o640 {
				t.Fatalf("mode of new after its ACL: %v %v, want 0640", fi.Mode(), err)
			}
			for i := range 14 { // lookups by name, not just the listing
				n := fmt.Sprintf("user.%s%d", strings.Repeat("n", i%5), i)
				if out, err := exec.Command(getfattr, "--only-values", "-n", n, filepath.Join(mnt, "manyblock")).Output(); err != nil || len(out) != 10+i*3 {
					t.Fatalf("Linux getfattr -n %s: %q %v", n, out, err)
				}
			}
			// Linux changes what ext4io wrote, and e2fsck still agrees.
			setx("new", "user.bylinux", "after ext4io")
			run(t, setfattr, "-x", "user.bigfresh", filepath.Join(mnt, "new"))
			umount(t, mnt, img)
			e2fs.Fsck(t, img)
			if !bytes.Contains([]byte(want.String()), []byte("from ext4io")) {
				t.Fatal("ext4io's attribute missing from its own dump")
			}
		})
	}
}

// checkLinuxBlock decodes the xattr block Linux wrote for path and checks
// that layout computes the same entry hashes, block hash and checksum.
func checkLinuxBlock(t *testing.T, img, path string) {
	t.Helper()
	var blk uint64
	fmt.Sscan(fileACL(t, img, path), &blk)
	raw, err := os.ReadFile(img)
	if err != nil {
		t.Fatal(err)
	}
	sb, err := layout.DecodeSuperblock(raw[layout.SuperblockOffset:])
	if err != nil {
		t.Fatal(err)
	}
	bs := uint64(sb.BlockSize())
	b := raw[blk*bs : (blk+1)*bs]
	h, attrs, err := layout.DecodeXattrBlock(b, blk)
	if err != nil {
		t.Fatal(err)
	}
	if sb.MetadataCsum() {
		if err := layout.VerifyXattrBlock(sb.CsumSeed(), blk, b); err != nil {
			t.Fatal(err)
		}
	}
	for _, x := range attrs {
		if want := layout.XattrHashEntry(x.Name, x.Value, false); x.Hash != want {
			t.Errorf("%s %s: Linux e_hash %#x, layout computes %#x", path, x.FullName(), x.Hash, want)
		}
	}
	if want := layout.XattrBlockHash(attrs); h.Hash != want {
		t.Errorf("%s: Linux h_hash %#x, layout computes %#x", path, h.Hash, want)
	}
	t.Logf("%s: block %d refcount %d, %d entries, hashes agree with Linux", path, blk, h.Refcount, len(attrs))
}

// TestXattrLinuxEAInode: values Linux stored in EA inodes (ea_inode) are
// read; such volumes stay refused for writing.
func TestXattrLinuxEAInode(t *testing.T) {
	setfattr := lookTool(t, "setfattr", "attr")
	img := filepath.Join(t.TempDir(), "ea.img")
	e2fs.Mkfs(t, img, "32M", "-b", "4096", "-I", "256", "-O", "ea_inode")
	mnt := mountLoop(t, img)
	huge := strings.Repeat("H", 12000)
	if err := os.WriteFile(filepath.Join(mnt, "f"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	run(t, setfattr, "-n", "user.huge", "-v", huge, filepath.Join(mnt, "f"))
	run(t, setfattr, "-n", "user.small", "-v", "s", filepath.Join(mnt, "f"))
	umount(t, mnt, img)
	v, err := ext4io.OpenImage(img, ext4io.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	got := ext4ioXattrs(t, v, []string{"f"})
	want := xattrDump{"f": {"user.huge": huge, "user.small": "s"}}
	if !equalDumps(got, want) {
		t.Fatalf("ext4io reads\n%v\nwant\n%v", got, want)
	}
	if _, err := ext4io.OpenImage(img, ext4io.Options{Writable: true}); err == nil {
		t.Fatal("ea_inode volume opened for writing")
	}
}
