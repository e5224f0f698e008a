package kvcheckpoint

import (
	"bytes"
	"encoding/json"
	"slices"
	"strconv"
	"unicode/utf8"
)

// canonicalRecord writes the RFC 8785 form of r without "sum" straight from the struct:
// what canonicalize would make of json.Marshal(r), without marshalling and parsing it
// again. Members are written in their sorted order, fixed here (a test holds it to the
// struct). It gives up (ok false) where it cannot be sure: a number of more than 15
// digits, a non-ASCII step name, an inline output or scope the canonicalizer does not take.
func (c *canonical) canonicalRecord(r *Record) (ok bool) {
	c.out = c.out[:0]
	c.verbatim = c.verbatim[:0]
	w := &c.out
	*w = append(*w, `{"after":`...)
	ok = c.graph(r.After)
	*w = append(*w, `,"approval":`...)
	if a := r.Approval; a == nil {
		*w = append(*w, "null"...)
	} else {
		*w = append(*w, `{"at":`...)
		c.strPtr(a.At)
		*w = append(*w, `,"by":`...)
		c.strPtr(a.By)
		*w = append(*w, `,"plan_digest":`...)
		c.string(a.PlanDigest)
		*w = append(*w, `,"sig":`...)
		c.strPtr(a.Sig)
		*w = append(*w, `,"since":`...)
		c.string(a.Since)
		*w = append(*w, `,"step":`...)
		c.string(a.Step)
		*w = append(*w, '}')
	}
	*w = append(*w, `,"commands":`...)
	ok = c.commands(r.Commands) && ok
	*w = append(*w, `,"created_at":`...)
	c.string(r.CreatedAt)
	*w = append(*w, `,"epoch":`...)
	c.string(r.Epoch)
	*w = append(*w, `,"generation":`...)
	ok = c.int(int64(r.Generation)) && ok
	*w = append(*w, `,"handover":`...)
	c.strPtr(r.Handover)
	*w = append(*w, `,"lease":`...)
	ok = c.lease(r.Lease) && ok
	*w = append(*w, `,"next_action":`...)
	c.string(r.NextAction)
	*w = append(*w, `,"params":`...)
	ok = c.params(r.Params) && ok
	*w = append(*w, `,"pipeline":`...)
	c.strings(r.Pipeline)
	*w = append(*w, `,"prev":`...)
	ok = c.uint(r.Prev) && ok
	*w = append(*w, `,"progress":`...)
	ok = c.progress(r.Progress) && ok
	*w = append(*w, `,"progressed_at":`...)
	c.string(r.ProgressedAt)
	*w = append(*w, `,"requests":`...)
	c.strings(r.Requests)
	*w = append(*w, `,"restarts":`...)
	ok = c.int(int64(r.Restarts)) && ok
	*w = append(*w, `,"run_id":`...)
	c.string(r.RunID)
	*w = append(*w, `,"schema":`...)
	ok = c.int(int64(r.Schema)) && ok
	c.sigAt = len(*w)
	*w = append(*w, `,"snapshot":`...)
	ok = c.output(r.Snapshot) && ok
	*w = append(*w, `,"source_fingerprint":`...)
	c.strPtr(r.SourceFingerprint)
	*w = append(*w, `,"status":`...)
	c.string(string(r.Status))
	*w = append(*w, `,"steps":`...)
	ok = c.steps(r.Steps) && ok
	c.sumAt = len(*w)
	*w = append(*w, `,"undo":`...)
	if u := r.Undo; u == nil {
		*w = append(*w, "null"...)
	} else {
		*w = append(*w, `{"cursor":`...)
		ok = c.int(int64(u.Cursor)) && ok
		*w = append(*w, `,"previous_status":`...)
		c.string(string(u.PreviousStatus))
		*w = append(*w, `,"request_id":`...)
		c.string(u.RequestID)
		*w = append(*w, `,"reversed":`...)
		ok = c.int(int64(u.Reversed)) && ok
		*w = append(*w, `,"scope":`...)
		ok = c.raw(u.Scope) && ok
		*w = append(*w, `,"total":`...)
		ok = c.int(int64(u.Total)) && ok
		*w = append(*w, '}')
	}
	*w = append(*w, `,"updated_at":`...)
	c.string(r.UpdatedAt)
	*w = append(*w, '}')
	return ok
}

func (c *canonical) lease(l *Lease) bool {
	w := &c.out
	if l == nil {
		*w = append(*w, "null"...)
		return true
	}
	*w = append(*w, `{"owner":`...)
	c.string(l.Owner)
	*w = append(*w, `,"owner_inbox":`...)
	c.string(l.OwnerInbox)
	*w = append(*w, `,"step":`...)
	c.string(l.Step)
	*w = append(*w, `,"token":`...)
	ok := c.uint(l.Token)
	*w = append(*w, `,"write_id":`...)
	c.string(l.WriteID)
	*w = append(*w, '}')
	return ok
}

func (c *canonical) progress(g *Progress) bool {
	w := &c.out
	if g == nil {
		*w = append(*w, "null"...)
		return true
	}
	*w = append(*w, `{"count":`...)
	ok := c.int(int64(g.Count))
	*w = append(*w, `,"no_progress":`...)
	ok = c.int(int64(g.NoProgress)) && ok
	*w = append(*w, `,"step":`...)
	c.string(g.Step)
	*w = append(*w, '}')
	return ok
}

// graph writes the steps' After lists, by step name in sorted order.
func (c *canonical) graph(g Graph) bool {
	if g == nil {
		c.out = append(c.out, "null"...)
		return true
	}
	names := make([]string, 0, len(g))
	for name := range g {
		for i := 0; i < len(name); i++ {
			if name[i] >= 0x80 {
				return false // UTF-16 order differs from byte order: left to the general path
			}
		}
		names = append(names, name)
	}
	slices.Sort(names)
	c.out = append(c.out, '{')
	for i, name := range names {
		if i > 0 {
			c.out = append(c.out, ',')
		}
		c.string(name)
		c.out = append(c.out, ':')
		c.strings(g[name])
	}
	c.out = append(c.out, '}')
	return true
}

func (c *canonical) steps(m map[string]*Step) bool {
	if m == nil {
		c.out = append(c.out, "null"...)
		return true
	}
	names := c.names[:0]
	for name := range m {
		for i := 0; i < len(name); i++ {
			if name[i] >= 0x80 {
				return false // UTF-16 order differs from byte order: left to the general path
			}
		}
		names = append(names, name)
	}
	for i := 1; i < len(names); i++ { // pipelines are short
		for j := i; j > 0 && names[j] < names[j-1]; j-- {
			names[j], names[j-1] = names[j-1], names[j]
		}
	}
	c.names = names[:0]
	ok := true
	c.out = append(c.out, '{')
	for i, name := range names {
		if i > 0 {
			c.out = append(c.out, ',')
		}
		c.string(name)
		c.out = append(c.out, ':')
		ok = c.step(m[name]) && ok
	}
	c.out = append(c.out, '}')
	return ok
}

func (c *canonical) step(s *Step) bool {
	w := &c.out
	if s == nil {
		*w = append(*w, "null"...)
		return true
	}
	*w = append(*w, `{"attempts":`...)
	ok := c.int(int64(s.Attempts))
	*w = append(*w, `,"effects":`...)
	if e := s.Effects; e == nil {
		*w = append(*w, "null"...)
	} else {
		*w = append(*w, `{"intents_open":`...)
		ok = c.int(int64(e.IntentsOpen)) && ok
		*w = append(*w, `,"keys":`...)
		ok = c.int(int64(e.Keys)) && ok
		*w = append(*w, '}')
	}
	*w = append(*w, `,"finished_at":`...)
	c.strPtr(s.FinishedAt)
	*w = append(*w, `,"input_fingerprint":`...)
	c.strPtr(s.InputFingerprint)
	*w = append(*w, `,"last_error":`...)
	c.strPtr(s.LastError)
	*w = append(*w, `,"output":`...)
	ok = c.output(s.Output) && ok
	*w = append(*w, `,"parked":`...)
	if s.Parked == nil {
		*w = append(*w, "null"...)
	} else {
		*w = append(*w, '[')
		for i, p := range s.Parked {
			if i > 0 {
				*w = append(*w, ',')
			}
			*w = append(*w, `{"item":`...)
			c.string(p.Item)
			*w = append(*w, `,"reason":`...)
			c.string(p.Reason)
			*w = append(*w, '}')
		}
		*w = append(*w, ']')
	}
	*w = append(*w, `,"parked_artifact":`...)
	ok = c.output(s.ParkedArtifact) && ok
	*w = append(*w, `,"parked_count":`...)
	ok = c.int(int64(s.ParkedCount)) && ok
	*w = append(*w, `,"started_at":`...)
	c.strPtr(s.StartedAt)
	*w = append(*w, `,"status":`...)
	c.string(string(s.Status))
	*w = append(*w, `,"token":`...)
	if s.Token == nil {
		*w = append(*w, "null"...)
	} else {
		ok = c.uint(*s.Token) && ok
	}
	*w = append(*w, `,"versions":{"code":`...)
	c.strPtr(s.Versions.Code)
	*w = append(*w, `,"model":`...)
	c.strPtr(s.Versions.Model)
	*w = append(*w, `,"prompt":`...)
	c.strPtr(s.Versions.Prompt)
	*w = append(*w, `,"schema":`...)
	c.strPtr(s.Versions.Schema)
	*w = append(*w, "}}"...)
	return ok
}

// output writes an output; inline and object are left out when empty (omitempty).
func (c *canonical) output(o *Output) bool {
	if o == nil {
		c.out = append(c.out, "null"...)
		return true
	}
	c.out = append(c.out, `{"digest":`...)
	c.string(o.Digest)
	ok := true
	if len(o.Inline) > 0 {
		c.out = append(c.out, `,"inline":`...)
		ok = c.raw(o.Inline)
	}
	if o.Object != "" {
		c.out = append(c.out, `,"object":`...)
		c.string(o.Object)
	}
	c.out = append(c.out, `,"size":`...)
	ok = c.int(o.Size) && ok
	c.out = append(c.out, '}')
	return ok
}

// raw writes an embedded JSON value canonically (a nil one as null, as encoding/json does).
func (c *canonical) raw(m json.RawMessage) bool {
	if m == nil {
		c.out = append(c.out, "null"...)
		return true
	}
	src, pos := c.src, c.pos
	defer func() { c.src, c.pos = src, pos }()
	c.src, c.pos = m, 0
	start := len(c.out)
	c.space()
	if !c.value(0) {
		return false
	}
	c.space()
	if !bytes.Equal(c.out[start:], m) {
		c.verbatim = append(c.verbatim, span{start: start, end: len(c.out), raw: m})
	}
	return c.pos == len(m)
}

// stored is the record as Encode stores it: out (the canonical form) with the sum in its
// place and each embedded value as encoding/json stores a json.RawMessage (compact, HTML
// characters escaped), so an inline output keeps the bytes its digest covers.
func (c *canonical) stored(sum string, sig []byte) []byte {
	out := make([]byte, 0, len(c.out)+len(`,"sig":,"sum":""`)+len(sig)+len(sum)+64)
	at := 0
	copyTo := func(end int) {
		if sig != nil && at <= c.sigAt && c.sigAt <= end {
			out = append(out, c.out[at:c.sigAt]...)
			out = append(out, `,"sig":`...)
			out = append(out, sig...)
			at, sig = c.sigAt, nil
		}
		if at <= c.sumAt && c.sumAt <= end {
			out = append(out, c.out[at:c.sumAt]...)
			out = append(out, `,"sum":"`...)
			out = append(out, sum...)
			out = append(out, '"')
			at = c.sumAt
		}
		out = append(out, c.out[at:end]...)
		at = end
	}
	var compact, escaped bytes.Buffer
	for _, v := range c.verbatim {
		copyTo(v.start)
		if !rewritten(v.raw) {
			out = append(out, v.raw...) // already as encoding/json would store it
			at = v.end
			continue
		}
		compact.Reset()
		escaped.Reset()
		_ = json.Compact(&compact, v.raw) // raw was just parsed: valid JSON
		json.HTMLEscape(&escaped, compact.Bytes())
		out = append(out, escaped.Bytes()...)
		at = v.end
	}
	copyTo(len(c.out))
	return out
}

// storedLen is the length of stored(sum, nil) for a sum of sumLen bytes, without making it.
func (c *canonical) storedLen(sumLen int) int {
	return c.writtenLen() + len(`,"sum":""`) + sumLen
}

// writtenLen is the length of out with its embedded values as stored writes them.
func (c *canonical) writtenLen() int {
	n := len(c.out)
	for _, v := range c.verbatim {
		n += storedRawLen(v.raw) - (v.end - v.start)
	}
	return n
}

// rewritten says whether encoding/json stores raw otherwise than as it is: raw holds space
// between tokens (or in a string), or a character it escapes (<, >, &, U+2028, U+2029).
// bytes.ContainsAny(raw, " \t\r\n<>&\u2028\u2029"), byte by byte.
func rewritten(raw []byte) bool {
	for i, b := range raw {
		switch b {
		case ' ', '\t', '\r', '\n', '<', '>', '&':
			return true
		case 0xE2: // U+2028 and U+2029 are E2 80 A8 and E2 80 A9
			if i+2 < len(raw) && raw[i+1] == 0x80 && (raw[i+2] == 0xA8 || raw[i+2] == 0xA9) {
				return true
			}
		}
	}
	return false
}

// storedRawLen is the length of an embedded value as stored writes it.
func storedRawLen(raw json.RawMessage) int {
	if !rewritten(raw) {
		return len(raw)
	}
	var compact, escaped bytes.Buffer
	_ = json.Compact(&compact, raw) // raw was just parsed: valid JSON
	json.HTMLEscape(&escaped, compact.Bytes())
	return escaped.Len()
}

// int writes n as RFC 8785 does; more than 15 digits is left to the general path, which
// writes it as a double does.
func (c *canonical) int(n int64) bool {
	c.out = strconv.AppendInt(c.out, n, 10)
	return n > -1e15 && n < 1e15
}

func (c *canonical) uint(n uint64) bool {
	c.out = strconv.AppendUint(c.out, n, 10)
	return n < 1e15
}

func (c *canonical) strPtr(s *string) {
	if s == nil {
		c.out = append(c.out, "null"...)
		return
	}
	c.string(*s)
}

func (c *canonical) strings(ss []string) {
	if ss == nil {
		c.out = append(c.out, "null"...)
		return
	}
	c.out = append(c.out, '[')
	for i, s := range ss {
		if i > 0 {
			c.out = append(c.out, ',')
		}
		c.string(s)
	}
	c.out = append(c.out, ']')
}

// string writes a Go string as encoding/json then RFC 8785 would: invalid UTF-8 as U+FFFD,
// '"', '\\' and control characters escaped, everything else as it is.
func (c *canonical) string(s string) {
	c.out = append(c.out, '"')
	start := 0
	for i := 0; i < len(s); {
		b := s[i]
		if b >= 0x20 && b != '"' && b != '\\' && b < utf8.RuneSelf {
			i++
			continue
		}
		if b >= utf8.RuneSelf {
			r, size := utf8.DecodeRuneInString(s[i:])
			if r != utf8.RuneError || size != 1 {
				i += size
				continue
			}
			c.out = append(c.out, s[start:i]...)
			c.out = append(c.out, "\uFFFD"...)
			i++
			start = i
			continue
		}
		c.out = append(c.out, s[start:i]...)
		c.out = appendEscaped(c.out, b)
		i++
		start = i
	}
	c.out = append(c.out, s[start:]...)
	c.out = append(c.out, '"')
}

func (c *canonical) commands(cs []Command) bool {
	if cs == nil {
		c.out = append(c.out, "null"...)
		return true
	}
	ok := true
	c.out = append(c.out, '[')
	for i, cmd := range cs {
		if i > 0 {
			c.out = append(c.out, ',')
		}
		c.out = append(c.out, `{"args":`...)
		ok = c.raw(cmd.Args) && ok
		c.out = append(c.out, `,"at":`...)
		c.string(cmd.At)
		c.out = append(c.out, `,"by":`...)
		c.string(cmd.By)
		c.out = append(c.out, `,"request_id":`...)
		c.string(cmd.RequestID)
		c.out = append(c.out, `,"verb":`...)
		c.string(cmd.Verb)
		c.out = append(c.out, '}')
	}
	c.out = append(c.out, ']')
	return ok
}

// params writes p as its flat object, members sorted, "shadow" among them; it gives up on
// a member name that is not ASCII (RFC 8785 sorts by UTF-16 code units) and on a value the
// canonicalizer does not take.
func (c *canonical) params(p Params) bool {
	if _, bad := p.Input[ShadowMember]; bad {
		return false
	}
	names := append(c.names[:0], ShadowMember) // the scratch of step names, free until steps
	for k := range p.Input {
		names = append(names, k)
	}
	slices.Sort(names)
	c.names = names
	c.out = append(c.out, '{')
	ok := true
	for i, name := range names {
		for j := 0; j < len(name); j++ {
			if name[j] >= utf8.RuneSelf {
				return false
			}
		}
		if i > 0 {
			c.out = append(c.out, ',')
		}
		c.string(name)
		c.out = append(c.out, ':')
		if name == ShadowMember {
			c.out = strconv.AppendBool(c.out, p.Shadow)
			continue
		}
		ok = c.raw(p.Input[name]) && ok
	}
	c.out = append(c.out, '}')
	return ok
}
