package torture

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ext4io/ext4io/internal/mutant"
)

// Mutation check: each build-tagged ordering bug of internal/mutant must
// make the torture fail within mutantRounds rounds, for each of
// mutantSeeds. Run it with
//
//	TORTURE_MUTANTS=1 go test -run TestMutants -v -timeout 2h ./internal/torture
//
// (TORTURE_MUTANTS may instead list tags, comma-separated, to run only
// those; TORTURE_MUTANT_SEEDS a comma-separated list of seeds). It builds
// the package's test binary once per tag and runs TestMutantTarget in it.
// The untorn-write mutants are not build tags but replacements of the
// atomic write in the harness (testHookAtomic), run by the ordinary tests
// TestAtomicMutantInPlace and TestAtomicMutantTwoTransactions.
const mutantRounds = 200

var mutantSeeds = []uint64{1, 2, 3}

// roundsRE finds the failing round in Run's error ("seed N round R: ...").
var roundsRE = regexp.MustCompile(`torture: seed \d+ round (\d+):`)

func TestMutants(t *testing.T) {
	env := os.Getenv("TORTURE_MUTANTS")
	if env == "" {
		t.Skip("set TORTURE_MUTANTS=1 (or a list of tags) to run the mutation check")
	}
	tags := mutant.Names
	if env != "1" {
		tags = strings.Split(env, ",")
	}
	seeds := mutantSeeds
	if s := os.Getenv("TORTURE_MUTANT_SEEDS"); s != "" {
		seeds = nil
		for _, f := range strings.Split(s, ",") {
			n, err := strconv.ParseUint(f, 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			seeds = append(seeds, n)
		}
	}
	goBin := filepath.Join(os.Getenv("GOROOT"), "bin", "go")
	if _, err := os.Stat(goBin); err != nil {
		goBin = "go"
	}
	dir := t.TempDir()
	var table strings.Builder
	fmt.Fprintf(&table, "%-34s", "mutant \\ seed")
	for _, s := range seeds {
		fmt.Fprintf(&table, " %8d", s)
	}
	table.WriteString("\n")
	for _, tag := range tags {
		bin := filepath.Join(dir, "torture-"+tag+".test")
		if out, err := exec.Command(goBin, "test", "-c", "-tags", tag, "-o", bin, ".").CombinedOutput(); err != nil {
			t.Fatalf("build %s: %v\n%s", tag, err, out)
		}
		fmt.Fprintf(&table, "%-34s", tag)
		for _, seed := range seeds {
			start := time.Now()
			cmd := exec.Command(bin, "-test.run", "^TestMutantTarget$", "-test.v", "-test.timeout", "1h")
			cmd.Env = append(os.Environ(), "TORTURE_MUTANT_TARGET=1", fmt.Sprintf("TORTURE_SEED=%d", seed), "TORTURE_DIR="+dir)
			out, _ := cmd.CombinedOutput()
			m := roundsRE.FindSubmatch(out)
			if m == nil {
				fmt.Fprintf(&table, " %8s", "none")
				t.Errorf("%s seed %d: no failure in %d rounds (%s)\n%s", tag, seed, mutantRounds, time.Since(start).Round(time.Second), tail(out, 600))
				continue
			}
			round, _ := strconv.Atoi(string(m[1]))
			fmt.Fprintf(&table, " %8d", round+1) // rounds run, the failing one included
			t.Logf("%s seed %d: failed in round %d after %s: %s", tag, seed, round+1, time.Since(start).Round(time.Second), firstLine(out))
		}
		table.WriteString("\n")
	}
	t.Logf("rounds to failure (of at most %d):\n%s", mutantRounds, table.String())
}

// TestMutantTarget is the torture TestMutants runs in a mutant build: at
// most mutantRounds rounds, reporting the failure in the output.
func TestMutantTarget(t *testing.T) {
	if os.Getenv("TORTURE_MUTANT_TARGET") == "" {
		t.Skip("run by TestMutants")
	}
	seed, err := strconv.ParseUint(os.Getenv("TORTURE_SEED"), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	dir := os.Getenv("TORTURE_DIR")
	if dir == "" {
		dir = t.TempDir()
	}
	debugVersions = os.Getenv("TORTURE_DEBUG_VERSIONS") != ""
	var log bytes.Buffer
	sum, err := Run(Config{Seed: seed, MaxRounds: mutantRounds, Goroutines: 3, DeviceSize: 32 << 20, CrashEvery: 150, Dir: dir, Log: &log})
	t.Logf("summary: %v", sum)
	if err != nil {
		t.Logf("%v", err)
		return
	}
	t.Logf("no failure")
}

func firstLine(b []byte) string {
	i := bytes.Index(b, []byte("torture: seed"))
	if i < 0 {
		return ""
	}
	s := string(b[i:])
	if j := strings.IndexAny(s, "\n"); j >= 0 {
		s = s[:j]
	}
	if len(s) > 400 {
		s = s[:400] + "..."
	}
	return s
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}
