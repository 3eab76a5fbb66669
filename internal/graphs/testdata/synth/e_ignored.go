//go:build ignore

package synth

// Excluded by its build constraint: it would redeclare B.
func B() int { return A() }
