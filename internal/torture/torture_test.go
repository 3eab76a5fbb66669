package torture

import (
	"bytes"
	"maps"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ext4io/ext4io/blockdev"
	"github.com/ext4io/ext4io/blockdev/memdev"
)

func hasFsck() bool { _, err := exec.LookPath("e2fsck"); return err == nil }

// TestRun runs a bounded torture and expects every kind of round.
func TestRun(t *testing.T) {
	d := 4 * time.Second
	if testing.Short() {
		d = 2 * time.Second
	}
	if s := os.Getenv("TORTURE_DURATION"); s != "" {
		var err error
		if d, err = time.ParseDuration(s); err != nil {
			t.Fatal(err)
		}
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("TORTURE_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		seed = n
	}
	dir := os.Getenv("TORTURE_DIR") // keep failing images and logs
	if dir == "" {
		dir = t.TempDir()
	}
	t.Logf("seed %d", seed)
	var log bytes.Buffer
	cfg := Config{Seed: seed, Duration: d, Goroutines: 3, DeviceSize: 32 << 20, CrashEvery: 150, Dir: dir, Log: &log}
	sum, err := Run(cfg)
	t.Logf("summary: %v", sum)
	if err != nil {
		t.Fatal(err)
	}
	// Under load (-race on a busy machine) the duration may end after a
	// round or two without crash points (ENOSPC and file-backed rounds
	// have none): one more round at a time, each with the next seed,
	// until a crash image was recovered by ext4io.
	for extra := 0; sum.RecoveredByExt4io == 0 && extra < 20; extra++ {
		cfg.Seed, cfg.Duration, cfg.MaxRounds = seed+uint64(extra)+1, 0, 1
		more, err := Run(cfg)
		t.Logf("one more round, seed %d: %v", cfg.Seed, more)
		if err != nil {
			t.Fatal(err)
		}
		sum.Rounds += more.Rounds
		sum.Operations += more.Operations
		sum.Crashes += more.Crashes
		sum.RecoveredByExt4io += more.RecoveredByExt4io
		sum.E2fsckRuns += more.E2fsckRuns
		sum.Failures += more.Failures
	}
	if sum.Rounds == 0 || sum.Operations == 0 || sum.Crashes == 0 || sum.RecoveredByExt4io == 0 || sum.Failures != 0 {
		t.Fatalf("summary %v", sum)
	}
	if hasFsck() && sum.E2fsckRuns == 0 {
		t.Fatalf("no e2fsck run: %v", sum)
	}
}

// TestBrokenModelIsReported proves the harness can fail: a wrong expected
// byte must be reported with the seed, a saved image and op log.
func TestBrokenModelIsReported(t *testing.T) {
	testHookExpect = func(name string, want []byte) []byte {
		return append(want, 'x')
	}
	defer func() { testHookExpect = nil }()
	dir := t.TempDir()
	_, err := Run(Config{Seed: 7, Duration: 10 * time.Second, Goroutines: 2, DeviceSize: 16 << 20, CrashEvery: 100, Dir: dir})
	if err == nil {
		t.Fatal("a broken model check was not reported")
	}
	msg := err.Error()
	for _, s := range []string{"seed 7", "contents differ", "ext4io torture --seed 7", ".log"} {
		if !strings.Contains(msg, s) {
			t.Errorf("error %q lacks %q", msg, s)
		}
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) == 0 {
		t.Error("nothing saved")
	}
}

// TestRoundSeed: Config.RoundSeed runs exactly that round, whatever the
// duration (16201861495410494537 is a fault round).
func TestRoundSeed(t *testing.T) {
	var log bytes.Buffer
	sum, err := Run(Config{RoundSeed: 16201861495410494537, Duration: time.Hour, Goroutines: 2, DeviceSize: 16 << 20, CrashEvery: 40, Dir: t.TempDir(), Log: &log})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Rounds != 1 || sum.FaultRounds != 1 || !strings.Contains(log.String(), "round 0 seed 16201861495410494537: fault") {
		t.Fatalf("summary %v, log %q", sum, log.String())
	}
}

// TestSecondWriterIsReported proves a second writer that gets in fails the
// round: the hook points its open at a copy of the device nobody holds.
func TestSecondWriterIsReported(t *testing.T) {
	testHookSecondWriter = func(dev blockdev.Device) blockdev.Device {
		img := memdev.NewBlockSize(dev.Size(), 4096)
		buf := make([]byte, 1<<20)
		for off := int64(0); off < dev.Size(); off += int64(len(buf)) {
			dev.ReadAt(buf, off)
			img.WriteAt(buf, off)
		}
		return img
	}
	defer func() { testHookSecondWriter = nil }()
	_, err := Run(Config{Seed: 7, Duration: 10 * time.Second, Goroutines: 2, DeviceSize: 16 << 20, CrashEvery: 100, Dir: t.TempDir()})
	if err == nil {
		t.Fatal("a second writer that got in was not reported")
	}
	for _, s := range []string{"seed 7", "second writer", "succeeded", "ext4io torture --seed 7"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q lacks %q", err, s)
		}
	}
}

// TestBrokenXattrModelIsReported proves the xattr check can fail: an
// attribute the model wrongly expects must be reported with the seed.
func TestBrokenXattrModelIsReported(t *testing.T) {
	testHookExpectX = func(name string, cands []xset) []xset {
		for i, c := range cands {
			c = maps.Clone(c)
			if c == nil {
				c = xset{}
			}
			c["user.bogus"] = []byte("x")
			cands[i] = c
		}
		return cands
	}
	defer func() { testHookExpectX = nil }()
	_, err := Run(Config{Seed: 7, Duration: 10 * time.Second, Goroutines: 2, DeviceSize: 16 << 20, CrashEvery: 100, Dir: t.TempDir()})
	if err == nil {
		t.Fatal("a broken xattr model was not reported")
	}
	for _, s := range []string{"seed 7", "extended attributes", "user.bogus", "ext4io torture --seed 7"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q lacks %q", err, s)
		}
	}
}
