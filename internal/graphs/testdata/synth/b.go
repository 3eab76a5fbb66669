package synth

// B uses c.go (V) through helper, which is its own.
func B() int { return helper() }

func helper() int { return V }

// shadow's A is a local: no reference to a.go.
func shadow() int {
	A := 5
	return A
}

// callI uses d.go twice: the type I and its method M.
func callI(i I) int8 { return i.M() }

// field reads a struct field, which is not a top-level identifier.
func field(c C) int { return c.f } // C: one more reference to c.go
