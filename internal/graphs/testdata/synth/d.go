package synth

type I interface{ M() int8 }
