package low

const X = 1
