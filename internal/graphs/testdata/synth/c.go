package synth

type C struct{ f int }

func (C) M() int8 { return 0 }

const K = 2

var V = 3

// N runs back up to a.go.
func (c C) N() int { return A() }
