package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/rs/zerolog"
	"github.com/urfave/cli/v2"
)

// The process's logger: --log-level and --log-format, on stderr. Every
// line, the final error included (printFinalError), is in the one format.
// Under journald (stderr is the stream JOURNAL_STREAM names, as with the
// unit's StandardError=journal) every line starts with its level's
// sd-daemon(3) prefix ("<4>" for a warning), which journald takes for the
// entry's priority and strips: journalctl -p warning shows warnings and
// errors only. Files and pipes get the lines as they are.

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
	logJournal = underJournal(os.Getenv("JOURNAL_STREAM"), os.Stderr)
	var out io.Writer = os.Stderr
	switch c.String("log-format") {
	case "json":
		if logJournal {
			out = newJournalWriter(os.Stderr, nil)
		}
		logger = zerolog.New(out).With().Timestamp().Logger()
		logJSON = true
		c.App.ErrWriter = &stderrLines{}
	case "console":
		fi, _ := os.Stderr.Stat()
		tty := fi != nil && fi.Mode()&os.ModeCharDevice != 0
		con := zerolog.ConsoleWriter{Out: os.Stderr, TimeFormat: "15:04:05.000", NoColor: !tty}
		out = con
		if logJournal {
			out = newJournalWriter(os.Stderr, &con)
		}
		logger = zerolog.New(out).With().Timestamp().Logger()
	default:
		return usageErrorf(nil, "--log-format: %q is neither json nor console", c.String("log-format"))
	}
	logger = logger.Level(lvl)
	return nil
}

// logJournal is set once setupLogger has found stderr to be journald's
// stream.
var logJournal bool

// underJournal reports whether stderr is the journal's stream: env (the
// value of JOURNAL_STREAM, "DEVICE:INODE" in decimal, set by systemd for a
// service whose stdout or stderr goes to journald) names stderr's device
// and inode. A stderr redirected elsewhere (a file, a pipe) by the service
// or by a command it ran does not match, and keeps plain lines.
func underJournal(env string, stderr *os.File) bool {
	dev, ino, ok := strings.Cut(env, ":")
	if !ok {
		return false
	}
	d, err1 := strconv.ParseUint(dev, 10, 64)
	i, err2 := strconv.ParseUint(ino, 10, 64)
	if err1 != nil || err2 != nil {
		return false
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(int(stderr.Fd()), &st); err != nil {
		return false
	}
	return uint64(st.Dev) == d && st.Ino == i
}

// journalPriority is the sd-daemon(3) prefix of a zerolog level: <3>
// error, <4> warning, <6> info, <7> debug; <2> (critical) for fatal and
// panic, <5> (notice) for lines without a level.
func journalPriority(l zerolog.Level) string {
	switch l {
	case zerolog.TraceLevel, zerolog.DebugLevel:
		return "<7>"
	case zerolog.InfoLevel:
		return "<6>"
	case zerolog.WarnLevel:
		return "<4>"
	case zerolog.ErrorLevel:
		return "<3>"
	case zerolog.FatalLevel, zerolog.PanicLevel:
		return "<2>"
	default:
		return "<5>"
	}
}

// journalWriter is a zerolog.LevelWriter for journald's stream: each
// event, rendered by render (the console format) or as it is (JSON), goes
// to out with its level's prefix on every line, so a message of several
// lines keeps its priority for each of the entries journald makes of them.
type journalWriter struct {
	mu     sync.Mutex
	out    io.Writer
	render *zerolog.ConsoleWriter // nil: the JSON line as it is
	buf    bytes.Buffer           // the event rendered
	line   []byte                 // the event's lines with their prefixes
}

// newJournalWriter writes to out, through render when it is not nil (its
// Out is replaced).
func newJournalWriter(out io.Writer, render *zerolog.ConsoleWriter) *journalWriter {
	w := &journalWriter{out: out}
	if render != nil {
		r := *render
		r.Out = &w.buf
		w.render = &r
	}
	return w
}

// Write writes a line without a level (logger.Log()).
func (w *journalWriter) Write(p []byte) (int, error) {
	return w.WriteLevel(zerolog.NoLevel, p)
}

// WriteLevel writes the event p of level l.
func (w *journalWriter) WriteLevel(l zerolog.Level, p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	text := p
	if w.render != nil {
		w.buf.Reset()
		if _, err := w.render.Write(p); err != nil {
			return 0, err
		}
		text = w.buf.Bytes()
	}
	w.line = appendJournalLines(w.line[:0], journalPriority(l), text)
	if _, err := w.out.Write(w.line); err != nil {
		return 0, err
	}
	return len(p), nil
}

// appendJournalLines appends text to dst with prefix before each of its
// lines; the last line ends with a newline.
func appendJournalLines(dst []byte, prefix string, text []byte) []byte {
	text = bytes.TrimRight(text, "\n")
	for len(text) > 0 {
		line := text
		if i := bytes.IndexByte(text, '\n'); i >= 0 {
			line, text = text[:i], text[i+1:]
		} else {
			text = nil
		}
		dst = append(dst, prefix...)
		dst = append(dst, line...)
		dst = append(dst, '\n')
	}
	return dst
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
		var out io.Writer = os.Stderr
		if logJournal {
			out = journalLevel{newJournalWriter(os.Stderr, nil), zerolog.ErrorLevel}
		}
		l := zerolog.New(out).With().Timestamp().Logger()
		l.Log().Str("level", zerolog.ErrorLevel.String()).
			Int("exit_code", code).Msg(finalMessage(err))
		return
	}
	line := fmt.Sprintf("iser-attach: %s\n", finalMessage(err))
	if logJournal {
		line = journalPriority(zerolog.ErrorLevel) + line
	}
	os.Stderr.WriteString(line)
}

// journalLevel writes every line at one level (the final error's, logged
// without a level so that --log-level cannot hide it).
type journalLevel struct {
	w *journalWriter
	l zerolog.Level
}

func (j journalLevel) Write(p []byte) (int, error) { return j.w.WriteLevel(j.l, p) }

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
