package torture

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestFailReproduces: the command line a failure prints reruns the run as
// configured, --fast-commit included.
func TestFailReproduces(t *testing.T) {
	for _, fc := range []bool{false, true} {
		r := &runner{cfg: Config{Seed: 7, FastCommit: fc, Goroutines: 4, Dir: t.TempDir()}, round: 1}
		err := r.fail(42, nil, nil, errors.New("boom"))
		msg := err.Error()
		assert.Contains(t, msg, "ext4io torture --seed 7 ")
		assert.Contains(t, msg, "--round-seed 42")
		if fc {
			assert.Contains(t, msg, " --fast-commit ")
		} else {
			assert.NotContains(t, msg, "--fast-commit")
		}
	}
}
