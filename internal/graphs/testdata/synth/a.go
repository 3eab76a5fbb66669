package synth

// A uses b.go (B), c.go (C twice, M, K) and d.go (I).
func A() int { return B() + int(C{}.M()) + K }

var _ I = C{}
