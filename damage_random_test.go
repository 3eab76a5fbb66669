package ext4io_test

import (
	"bytes"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/internal/e2fs"
)

// TestRandomDamage damages one metadata region of small images per seed
// (random byte changes, or zeroing) and walks the result: no panic, no
// hang, every error wraps a sentinel, and with metadata_csum every change
// to a checksummed region the walk reads is reported as ErrCorrupt. The
// walk goes through a device that fails the test on any write.
//
// Every other damaged image (every one with a journal) is also opened
// writable on a copy and written (damageWrite): no panic, no hang, no
// device write outside the device, every error wraps a sentinel. The
// *-journal bases hold committed transactions needing recovery; their
// damage includes kind "journal" (the journal's superblock, inode and log
// blocks), and each damaged image is also opened with Replay and walked.
// The read sweep and the write phase have time budgets of their own (8 s
// and 5 s per base image), which only bind under -race or a loaded machine.
// EXT4IO_DAMAGE_SEEDS sets the seeds per image kind (default 40, 400
// with EXT4IO_LONG);
// EXT4IO_DAMAGE_VERBOSE=1 logs every write-side failure.
func TestRandomDamage(t *testing.T) {
	t.Parallel()
	seeds := sized(20, 40, 400)
	if s := os.Getenv("EXT4IO_DAMAGE_SEEDS"); s != "" {
		fmt.Sscan(s, &seeds)
	}
	configs := []struct {
		name    string
		journal bool
		args    []string
	}{
		{"1k-csum", false, []string{"-b", "1024"}},
		{"1k-nocsum", false, []string{"-b", "1024", "-O", "^metadata_csum"}},
		{"4k-csum", false, []string{"-b", "4096"}},
		{"4k-nocsum", false, []string{"-b", "4096", "-O", "^metadata_csum"}},
		{"1k-journal", true, []string{"-b", "1024"}},
		{"4k-journal-nocsum", true, []string{"-b", "4096", "-O", "^metadata_csum"}},
	}
	for ci, c := range configs {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			base := buildSweepBase(t, c.name, uint64(ci+1), c.journal, c.args...)
			// The write sequence must run cleanly on the pristine image
			// (replaying the journal first on a journaled base) and leave
			// it clean for e2fsck.
			wc := newWriteCounts()
			pdev := base.clone(t, 0, nil)
			if n, err := damageWrite(t, c.name+" pristine", pdev, base, 0, wc); n > 0 {
				t.Fatalf("%s: write sequence on the pristine image: %d failures, first %v", c.name, n, err)
			}
			written := filepath.Join(t.TempDir(), "written.img")
			saveDev(t, pdev.Device, written)
			e2fs.Fsck(t, written)
			wc = newWriteCounts()
			counts := map[string]int{}
			kinds := map[string]int{}
			jsubs := map[string]int{}
			tried, undetected := 0, 0
			// Damaged images for the write phase: every other one, every
			// one on a journaled base.
			type damaged struct {
				label string
				seed  uint64
				tg    damageTarget
				data  []byte
			}
			var writeList []damaged
			start := time.Now()
			for s := 0; s < seeds; s++ {
				if time.Since(start) > 8*time.Second {
					t.Logf("time budget reached after %d seeds", s)
					break
				}
				seed := uint64(ci)<<32 | uint64(s)
				rng := rand.New(rand.NewPCG(seed, 99))
				// A kind first (uniformly; "journal" half the time on a
				// journaled base), then a region of that kind.
				kindNames := slices.Sorted(maps.Keys(base.byKind))
				kind := ""
				if base.journal && rng.IntN(2) == 0 {
					kind = "journal"
				} else {
					kind = kindNames[rng.IntN(len(kindNames))]
				}
				ofKind := base.byKind[kind]
				if kind == "journal" {
					// A part (superblock, inode, descriptor, data, commit,
					// revoke) uniformly, then a block of it.
					bySub := map[string][]damageTarget{}
					for _, tg := range ofKind {
						bySub[tg.sub] = append(bySub[tg.sub], tg)
					}
					subs := slices.Sorted(maps.Keys(bySub))
					ofKind = bySub[subs[rng.IntN(len(subs))]]
				}
				tg := ofKind[rng.IntN(len(ofKind))]
				data := append([]byte(nil), base.img[tg.off:tg.off+tg.n]...)
				mode := "zero"
				if rng.IntN(4) != 0 {
					mode = "flip"
					for k := 1 + rng.IntN(4); k > 0; k-- {
						data[rng.Int64N(tg.n)] ^= byte(1 + rng.IntN(255))
					}
				} else {
					clear(data)
				}
				if bytes.Equal(data, base.img[tg.off:tg.off+tg.n]) {
					continue // zeroing an all-zero region changes nothing
				}
				what := tg.kind
				if tg.sub != "" {
					what += " (" + tg.sub + ")"
				}
				label := fmt.Sprintf("%s seed %d: %s %s at byte %d (+%d)", c.name, seed, mode, what, tg.off, tg.n)
				ro := base.clone(t, tg.off, data)
				ro.readOnly = true
				st := openAndWalk(t, label, 20*time.Second, func() (*ext4io.Volume, error) {
					return ext4io.Open(ro, ext4io.Options{})
				}, nil)
				ro.check(t, label)
				if st == nil {
					continue
				}
				tried++
				kinds[tg.kind]++
				if tg.sub != "" {
					jsubs[tg.sub]++
				}
				for k, n := range st.errs {
					counts[k] += n
				}
				if base.csum && tg.detect && st.corrupt() == 0 {
					undetected++
					t.Errorf("%s: checksummed metadata damaged, walk saw no ErrCorrupt (errors %v, %d files read)", label, st.errs, st.files)
				}
				if base.journal || s%2 == 0 {
					writeList = append(writeList, damaged{label, seed, tg, data})
				}
			}
			readTime := time.Since(start)
			// The write phase, with its own time budget so that it does
			// not cut the read sweep short (under -race).
			wstart := time.Now()
			for i, d := range writeList {
				if time.Since(wstart) > 5*time.Second {
					t.Logf("write-phase time budget reached after %d of %d images", i, len(writeList))
					break
				}
				if base.journal {
					// Replay into (a copy of) the device, then walk. With
					// the damage outside the journal the walk would read
					// what the read-only open's in-memory replay read: skip
					// it.
					dev := base.clone(t, d.tg.off, d.data)
					rlabel := d.label + " [Replay]"
					var openErr error
					if d.tg.kind == "journal" {
						rst := openAndWalk(t, rlabel, 20*time.Second, func() (*ext4io.Volume, error) {
							return ext4io.Open(dev, ext4io.Options{Replay: true})
						}, nil)
						if rst == nil {
							continue // panic or hang, reported
						}
						openErr = rst.openErr
					} else {
						openErr = wop(t, rlabel, "open", func() error {
							v, err := ext4io.Open(dev, ext4io.Options{Replay: true})
							if err == nil {
								err = v.Close()
							}
							return err
						})
					}
					dev.check(t, rlabel)
					wc.replayTried++
					if openErr == nil {
						wc.replayOpened++
					} else {
						wc.replayRefused[wc.classify(t, rlabel, "open", openErr)]++
					}
				}
				damageWrite(t, d.label+" [Writable]", base.clone(t, d.tg.off, d.data), base, d.seed, wc)
			}
			writeTime := time.Since(wstart)
			t.Logf("%s: %d damaged images walked in %v; by region %v; errors by sentinel %v; undetected %d; panics 0",
				c.name, tried, readTime.Round(time.Millisecond), kinds, counts, undetected)
			if len(jsubs) > 0 {
				t.Logf("%s: journal damage by part %v; Replay opens: %d tried, %d opened, refused by sentinel %v",
					c.name, jsubs, wc.replayTried, wc.replayOpened, wc.replayRefused)
			}
			t.Logf("%s: writable (%v): %d damaged images tried, %d opened (%d replayed a journal), refused by sentinel %v; walk errors %v; ops ok %d, failed by sentinel %v; %d reopened and walked after Close; device writes %d, out of bounds %d; panics 0, hangs 0",
				c.name, writeTime.Round(time.Millisecond), wc.tried, wc.opened, wc.replayed, wc.refused, wc.walkErrs, wc.opsOK, wc.opsFailed, wc.rewalked, wc.devWrites, wc.oob)
			if wc.bareCorrupt > 0 {
				t.Logf("%s: %d write-side ErrCorrupt errors carry no *CorruptError; first: %s", c.name, wc.bareCorrupt, wc.firstBare)
			}
		})
	}
}
