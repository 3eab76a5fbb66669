package synth

// Test files are left out: this reference to c.go is not counted.
var _ = V
