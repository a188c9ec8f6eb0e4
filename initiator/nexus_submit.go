package initiator

import (
	"context"
	"fmt"
)

// This file holds Nexus.Submit: a command started with a callback that
// follows it across sessions.

// nexusCmd is a command started with Nexus.Submit, from its submission to
// its CommandDone; it is pooled.
type nexusCmd struct {
	n        *Nexus
	c        Command // CDB in cdb
	cdb      [16]byte
	done     CommandDone
	tag      Tag
	s        *Session // the session it was last submitted on
	attempt  int
	timeouts int
}

// Submit starts a SCSI command like Session.Submit on the current session
// and returns at once; done.CommandDone reports its end exactly once, with
// what Do would return. A command whose session fails, or that a task
// management function ended, is issued again on the next session (or the
// same one) within Do's bounds; while there is no session it waits, up to
// the replacement timeout. Submit returns an error, and done is not
// called, only for an invalid command.
func (n *Nexus) Submit(c *Command, done CommandDone, tag Tag) error {
	if err := checkCommand(c); err != nil {
		return err
	}
	if done == nil {
		return fmt.Errorf("scsi command 0x%02x: Submit without a CommandDone", c.CDB[0])
	}
	x := n.cmds.Get()
	x.n = n
	x.c = *c
	x.c.CDB = x.cdb[:copy(x.cdb[:], c.CDB)]
	x.done, x.tag, x.attempt, x.timeouts = done, tag, 0, 0
	x.issue()
	return nil
}

// issue submits x on the current session, or waits for one on a goroutine
// while recovery runs.
func (x *nexusCmd) issue() {
	if s := x.n.up.Load(); s != nil && !s.dead.Load() {
		x.s = s
		if s.Submit(&x.c, x, 0) == nil {
			return
		}
	}
	go x.await()
}

// await waits for a session and submits x on it.
func (x *nexusCmd) await() {
	for {
		s, err := x.n.session(context.Background())
		if err != nil {
			x.finish(nil, fmt.Errorf("scsi command 0x%02x: %w", x.c.CDB[0], err))
			return
		}
		x.s = s
		if s.Submit(&x.c, x, 0) == nil {
			return
		}
		// s ended before the command was sent: session marks it down.
	}
}

// CommandDone implements CommandDone for the session x was submitted on.
func (x *nexusCmd) CommandDone(_ Tag, r *Result, err error) {
	if err == nil {
		x.finish(r, nil)
		return
	}
	again, err := x.n.reissue(x.s, err, &x.timeouts, x.attempt)
	if !again {
		x.finish(nil, err)
		return
	}
	x.attempt++
	x.n.log.Debug().Err(err).Uint8("op", x.c.CDB[0]).Msg("command reissued")
	x.issue()
}

// finish reports x's end and returns x to the pool.
func (x *nexusCmd) finish(r *Result, err error) {
	done, tag := x.done, x.tag
	x.done, x.s, x.c = nil, nil, Command{}
	x.n.cmds.Put(x)
	done.CommandDone(tag, r, err)
}
