package mid_test

import _ "example.com/m"
