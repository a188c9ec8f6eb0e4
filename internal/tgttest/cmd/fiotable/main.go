package main

import (
	"flag"
	"fmt"
	"os"
)

func main() {
	dir := flag.String("dir", ".", "directory holding a-WORKLOAD.json and b-WORKLOAD.json")
	labelA := flag.String("a", "a", "name of system a")
	labelB := flag.String("b", "b", "name of system b")
	flag.Parse()
	if err := writeTable(os.Stdout, *dir, *labelA, *labelB); err != nil {
		fmt.Fprintln(os.Stderr, "fiotable:", err)
		os.Exit(1)
	}
}
