package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"

	"github.com/rs/zerolog"
	"github.com/urfave/cli/v2"
)

// The process's logger: --log-level and --log-format, on stderr. Every
// line, the final error included (printFinalError), is in the one format.

// logTimeFormat is the timestamp of JSON lines: RFC 3339 with milliseconds.
const logTimeFormat = "2006-01-02T15:04:05.000Z07:00"

func init() {
	// Timestamps keep their milliseconds (the console writer parses the
	// field back with this format) and durations print with their unit
	// ("250ms", "2m0s") rather than as a bare number of milliseconds.
	zerolog.TimeFieldFormat = logTimeFormat
	zerolog.DurationFieldFormat = zerolog.DurationFormatString
}

// logger is the process's logger, set up by setupLogger.
var logger zerolog.Logger

// logJSON is set once setupLogger has chosen --log-format json.
var logJSON bool

// setupLogger reads --log-level and --log-format.
func setupLogger(c *cli.Context) error {
	lvl, err := zerolog.ParseLevel(c.String("log-level"))
	if err != nil {
		return usageErrorf(nil, "--log-level: %s", err)
	}
	switch c.String("log-format") {
	case "json":
		logger = zerolog.New(os.Stderr).With().Timestamp().Logger()
		logJSON = true
		c.App.ErrWriter = &stderrLines{}
	case "console":
		fi, _ := os.Stderr.Stat()
		tty := fi != nil && fi.Mode()&os.ModeCharDevice != 0
		logger = zerolog.New(zerolog.ConsoleWriter{Out: os.Stderr, TimeFormat: "15:04:05.000", NoColor: !tty}).
			With().Timestamp().Logger()
	default:
		return usageErrorf(nil, "--log-format: %q is neither json nor console", c.String("log-format"))
	}
	logger = logger.Level(lvl)
	return nil
}

// stderrLines turns what commands print for the operator on stderr
// (c.App.ErrWriter: warnings about secret files, notes) into log lines,
// so that with --log-format json stderr holds JSON only. A line with
// "warning: " in it is a warning, any other a notice at info level.
type stderrLines struct {
	mu  sync.Mutex
	buf []byte
}

func (w *stderrLines) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			return len(p), nil
		}
		line := string(w.buf[:i])
		w.buf = w.buf[i+1:]
		if strings.Contains(line, "warning: ") {
			logger.Warn().Msg(line)
		} else {
			logger.Info().Msg(line)
		}
	}
}

// printFinalError reports the error a command ended with: one plain line
// "iser-attach: ...", or with --log-format json one JSON line at level
// error whose message is that error.
func printFinalError(err error) {
	if logJSON || argsWantJSON(os.Args[1:]) {
		code := 1
		var ec cli.ExitCoder
		if errors.As(err, &ec) && ec.ExitCode() != 0 {
			code = ec.ExitCode()
		}
		// Not through logger's level: the final error always shows.
		l := zerolog.New(os.Stderr).With().Timestamp().Logger()
		l.Log().Str("level", zerolog.ErrorLevel.String()).
			Int("exit_code", code).Msg(finalMessage(err))
		return
	}
	fmt.Fprintf(os.Stderr, "iser-attach: %s\n", finalMessage(err))
}

// argsWantJSON reports whether args ask for --log-format json: for the
// usage errors found before the logger is set up.
func argsWantJSON(args []string) bool {
	for i, a := range args {
		switch {
		case a == "--":
			return false
		case a == "--log-format=json" || a == "-log-format=json":
			return true
		case (a == "--log-format" || a == "-log-format") && i+1 < len(args):
			return args[i+1] == "json"
		}
	}
	return false
}

// finalMessage is err on one line; the errors joined in it (one per
// portal tried, say) are separated by "; ".
func finalMessage(err error) string {
	var parts []string
	for _, line := range strings.Split(err.Error(), "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			parts = append(parts, strings.Join(f, " "))
		}
	}
	return strings.Join(parts, "; ")
}
