package freelist

import (
	"runtime"
	"testing"
)

func TestListReusesAcrossGC(t *testing.T) {
	var l List[[64]byte]
	a, b := l.Get(), l.Get()
	if a == b {
		t.Fatal("two Gets returned the same object")
	}
	l.Put(a)
	l.Put(b)
	runtime.GC()
	runtime.GC()
	if c := l.Get(); c != b {
		t.Fatal("Get after a collection did not return the last object Put")
	}
	if c := l.Get(); c != a {
		t.Fatal("second Get did not return the first object Put")
	}
	l.Put(a)
	if n := testing.AllocsPerRun(100, func() { l.Put(l.Get()) }); n != 0 {
		t.Fatalf("%v allocations per Get and Put", n)
	}
}
