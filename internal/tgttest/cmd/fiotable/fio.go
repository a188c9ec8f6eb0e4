package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
)

// fioDir is one direction of a fio job's results.
type fioDir struct {
	IOPS     float64 `json:"iops"`
	BWBytes  float64 `json:"bw_bytes"` // bytes per second
	TotalIOs int64   `json:"total_ios"`
	ClatNS   struct {
		Mean       float64            `json:"mean"`
		Percentile map[string]float64 `json:"percentile"`
	} `json:"clat_ns"`
}

type fioJob struct {
	Name  string `json:"jobname"`
	Error int    `json:"error"`
	Read  fioDir `json:"read"`
	Write fioDir `json:"write"`
}

type fioReport struct {
	Version string   `json:"fio version"`
	Jobs    []fioJob `json:"jobs"`
}

// parseFio reads fio's JSON output. fio's nbd engine prints "fio:
// connected to NBD server" on stdout before the JSON, so everything before
// the first line that starts with '{' is skipped.
func parseFio(data []byte) (fioJob, error) {
	start := 0
	for start < len(data) && data[start] != '{' {
		nl := bytes.IndexByte(data[start:], '\n')
		if nl < 0 {
			start = len(data)
			break
		}
		start += nl + 1
	}
	var r fioReport
	if err := json.Unmarshal(data[start:], &r); err != nil {
		return fioJob{}, fmt.Errorf("parse fio json: %w", err)
	}
	if len(r.Jobs) != 1 {
		return fioJob{}, fmt.Errorf("parse fio json: %d jobs, want 1", len(r.Jobs))
	}
	j := r.Jobs[0]
	if j.Error != 0 {
		return j, fmt.Errorf("fio job %s: error %d", j.Name, j.Error)
	}
	return j, nil
}

func readFio(path string) (fioJob, bool, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return fioJob{}, false, nil
	}
	if err != nil {
		return fioJob{}, false, fmt.Errorf("read fio result: %w", err)
	}
	j, err := parseFio(data)
	if err != nil {
		return j, false, fmt.Errorf("%s: %w", path, err)
	}
	return j, true, nil
}
