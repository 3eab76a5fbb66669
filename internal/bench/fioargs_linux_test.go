package bench

import (
	"slices"
	"testing"
	"time"
)

// TestFioRuntimeArg: fio's --runtime is given in whole milliseconds,
// which fio honours for runs under a second; it took "0.300s" as no
// limit, so fsync-small's job ran until the filesystem was full.
func TestFioRuntimeArg(t *testing.T) {
	ws, err := selectWorkloads([]string{"fsync-small", "seqwrite-1m"})
	if err != nil {
		t.Fatal(err)
	}
	e := &kernelEnv{mnt: t.TempDir(), region: 64 << 20}
	for _, tc := range []struct {
		d    time.Duration
		want string
	}{{300 * time.Millisecond, "--runtime=300ms"}, {2 * time.Second, "--runtime=2000ms"}, {time.Microsecond, "--runtime=1ms"}} {
		for _, w := range ws {
			args := e.fioArgs(&config{Config: Config{Runtime: tc.d}}, w, 1)
			if !slices.Contains(args, tc.want) {
				t.Errorf("%s, runtime %v: fio args %q lack %s", w.Name, tc.d, args, tc.want)
			}
		}
	}
}
