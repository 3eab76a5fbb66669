package mid

import "example.com/m/low"

const Y = low.X
