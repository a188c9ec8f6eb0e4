package initiator

import "testing"

func TestSerialArithmetic(t *testing.T) {
	cases := []struct {
		a, b uint32
		lt   bool
	}{{1, 2, true}, {2, 1, false}, {1, 1, false}, {0xffffffff, 0, true}, {0, 0xffffffff, false}, {0x7fffffff, 0x80000000, true}}
	for _, c := range cases {
		if lt(c.a, c.b) != c.lt {
			t.Errorf("lt(%#x, %#x) = %v", c.a, c.b, !c.lt)
		}
	}
}
