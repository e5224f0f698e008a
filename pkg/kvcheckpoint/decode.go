package kvcheckpoint

import (
	"bytes"
	"encoding/json"
	"strconv"
	"unicode/utf8"
)

// decodeRecord decodes a record as encoding/json would, several times faster. It runs only
// on documents the canonicalizer took (valid JSON, plain ASCII keys, no duplicate key,
// integers of at most 15 digits), and gives up (ok false) on anything it does not know: an
// unknown or differently-cased key, a value of another type, an escape it does not decode.
// The caller then decodes with encoding/json, whose answer counts.
func decodeRecord(b []byte) (*Record, bool) {
	d := &decoder{b: b}
	r := &Record{}
	for first := true; ; {
		key, done, ok := d.member(&first)
		if !ok {
			return r, false
		}
		if done {
			break
		}
		switch string(key) {
		case "schema":
			ok = d.integer(&r.Schema)
		case "run_id":
			ok = d.str(&r.RunID)
		case "params":
			ok = d.params(&r.Params)
		case "created_at":
			ok = d.str(&r.CreatedAt)
		case "updated_at":
			ok = d.str(&r.UpdatedAt)
		case "epoch":
			ok = d.str(&r.Epoch)
		case "status":
			ok = d.str((*string)(&r.Status))
		case "pipeline":
			ok = d.strings(&r.Pipeline)
		case "prev":
			ok = d.uinteger(&r.Prev)
		case "after":
			ok = d.graph(&r.After)
		case "progressed_at":
			ok = d.str(&r.ProgressedAt)
		case "steps":
			ok = d.steps(&r.Steps)
		case "source_fingerprint":
			ok = d.strPtr(&r.SourceFingerprint)
		case "snapshot", legacySnapshot:
			ok = d.output(&r.Snapshot)
		case "lease":
			ok = d.lease(&r.Lease)
		case "next_action":
			ok = d.str(&r.NextAction)
		case "restarts":
			ok = d.integer(&r.Restarts)
		case "generation":
			ok = d.integer(&r.Generation)
		case "requests":
			ok = d.strings(&r.Requests)
		case "approval":
			ok = d.approval(&r.Approval)
		case "handover":
			ok = d.strPtr(&r.Handover)
		case "undo":
			ok = d.undo(&r.Undo)
		case "commands":
			ok = d.commands(&r.Commands)
		case "progress":
			ok = d.progress(&r.Progress)
		case "sum":
			ok = d.str(&r.Sum)
		case "sig":
			ok = d.sig(&r.Sig)
		default:
			ok = false
		}
		if !ok {
			return r, false
		}
	}
	d.space()
	return r, d.i == len(d.b)
}

type decoder struct {
	b []byte
	i int
}

func (d *decoder) space() {
	for d.i < len(d.b) {
		switch d.b[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

func (d *decoder) peek() byte {
	d.space()
	if d.i < len(d.b) {
		return d.b[d.i]
	}
	return 0
}

// null reads a null if one comes next.
func (d *decoder) null() bool {
	if d.peek() == 'n' && bytes.HasPrefix(d.b[d.i:], []byte("null")) {
		d.i += 4
		return true
	}
	return false
}

// member moves to the next member of an object: first reads its '{'. done is true after its
// '}'; otherwise key is the member's key and the decoder is at its value.
func (d *decoder) member(first *bool) (key []byte, done, ok bool) {
	switch c := d.peek(); {
	case *first:
		if c != '{' {
			return nil, false, false
		}
		d.i++
		*first = false
		if d.peek() == '}' {
			d.i++
			return nil, true, true
		}
	case c == ',':
		d.i++
	case c == '}':
		d.i++
		return nil, true, true
	default:
		return nil, false, false
	}
	key, ok = d.key()
	if !ok || d.peek() != ':' {
		return nil, false, false
	}
	d.i++
	return key, false, true
}

func (d *decoder) key() ([]byte, bool) {
	if d.peek() != '"' {
		return nil, false
	}
	end := bytes.IndexByte(d.b[d.i+1:], '"')
	if end < 0 {
		return nil, false
	}
	k := d.b[d.i+1 : d.i+1+end]
	if bytes.IndexByte(k, '\\') >= 0 {
		return nil, false
	}
	d.i += end + 2
	return k, true
}

func (d *decoder) str(s *string) bool {
	if d.peek() != '"' {
		return false
	}
	start := d.i + 1
	for j := start; j < len(d.b); j++ {
		switch d.b[j] {
		case '"':
			if !utf8.Valid(d.b[start:j]) {
				return false
			}
			*s = string(d.b[start:j])
			d.i = j + 1
			return true
		case '\\':
			return d.escaped(s)
		}
	}
	return false
}

// escaped reads a string with escapes through strconv, which unquotes JSON's escapes but
// for \/ and surrogates; those are left to encoding/json.
func (d *decoder) escaped(s *string) bool {
	start := d.i
	j := start + 1
	for j < len(d.b) && d.b[j] != '"' {
		if d.b[j] == '\\' {
			if j+1 >= len(d.b) || d.b[j+1] == '/' || d.b[j+1] == 'u' && j+2 < len(d.b) && (d.b[j+2] == 'd' || d.b[j+2] == 'D') {
				return false
			}
			j++
		}
		j++
	}
	if j >= len(d.b) {
		return false
	}
	u, err := strconv.Unquote(string(d.b[start : j+1]))
	if err != nil || !utf8.ValidString(u) {
		return false
	}
	*s = u
	d.i = j + 1
	return true
}

func (d *decoder) strPtr(p **string) bool {
	if d.null() {
		*p = nil
		return true
	}
	var s string
	if !d.str(&s) {
		return false
	}
	*p = &s
	return true
}

func (d *decoder) strings(p *[]string) bool {
	if d.null() {
		*p = nil
		return true
	}
	out := []string{}
	for first := true; ; {
		done, ok := d.element(&first)
		if !ok {
			return false
		}
		if done {
			*p = out
			return true
		}
		var s string
		if !d.str(&s) {
			return false
		}
		out = append(out, s)
	}
}

// element moves to the next element of an array: first reads its '['. done is true after
// its ']'; otherwise the decoder is at the element.
func (d *decoder) element(first *bool) (done, ok bool) {
	switch c := d.peek(); {
	case *first:
		if c != '[' {
			return false, false
		}
		d.i++
		*first = false
		if d.peek() == ']' {
			d.i++
			return true, true
		}
		return false, true
	case c == ',':
		d.i++
		return false, true
	case c == ']':
		d.i++
		return true, true
	}
	return false, false
}

// number returns the next number's literal: an integer (the canonicalizer took no other).
func (d *decoder) number() string {
	d.space()
	j := d.i
	if j < len(d.b) && d.b[j] == '-' {
		j++
	}
	for j < len(d.b) && d.b[j] >= '0' && d.b[j] <= '9' {
		j++
	}
	lit := string(d.b[d.i:j])
	d.i = j
	return lit
}

func (d *decoder) integer(p *int) bool {
	n, err := strconv.ParseInt(d.number(), 10, 64)
	*p = int(n)
	return err == nil
}

func (d *decoder) integer64(p *int64) bool {
	n, err := strconv.ParseInt(d.number(), 10, 64)
	*p = n
	return err == nil
}

func (d *decoder) uinteger(p *uint64) bool {
	n, err := strconv.ParseUint(d.number(), 10, 64)
	*p = n
	return err == nil
}

func (d *decoder) uint64Ptr(p **uint64) bool {
	if d.null() {
		*p = nil
		return true
	}
	n, err := strconv.ParseUint(d.number(), 10, 64)
	*p = &n
	return err == nil
}

func (d *decoder) boolean(p *bool) bool {
	switch {
	case d.peek() == 't' && bytes.HasPrefix(d.b[d.i:], []byte("true")):
		*p = true
		d.i += 4
	case d.peek() == 'f' && bytes.HasPrefix(d.b[d.i:], []byte("false")):
		*p = false
		d.i += 5
	default:
		return false
	}
	return true
}

// raw reads any value and keeps its bytes as written (encoding/json's json.RawMessage; a
// null is kept as "null").
func (d *decoder) raw(p *json.RawMessage) bool {
	d.space()
	start := d.i
	if !d.skip(0) {
		return false
	}
	*p = bytes.Clone(d.b[start:d.i])
	return true
}

func (d *decoder) skip(depth int) bool {
	if depth > maxDepth {
		return false
	}
	switch c := d.peek(); {
	case c == '{':
		for first := true; ; {
			_, done, ok := d.member(&first)
			if !ok || !done && !d.skip(depth+1) {
				return false
			}
			if done {
				return true
			}
		}
	case c == '[':
		for first := true; ; {
			done, ok := d.element(&first)
			if !ok || !done && !d.skip(depth+1) {
				return false
			}
			if done {
				return true
			}
		}
	case c == '"':
		var s string
		return d.str(&s)
	case c == 't' || c == 'f':
		var b bool
		return d.boolean(&b)
	case c == 'n':
		return d.null()
	default:
		return d.number() != ""
	}
}

func (d *decoder) params(p *Params) bool {
	for first := true; ; {
		key, done, ok := d.member(&first)
		if !ok {
			return false
		}
		if done {
			return true
		}
		switch string(key) {
		case ShadowMember:
			ok = d.boolean(&p.Shadow)
		default:
			var v json.RawMessage
			if ok = d.raw(&v); ok {
				if p.Input == nil {
					p.Input = map[string]json.RawMessage{}
				}
				p.Input[string(key)] = v
			}
		}
		if !ok {
			return false
		}
	}
}

func (d *decoder) graph(p *Graph) bool {
	if d.null() {
		*p = nil
		return true
	}
	g := Graph{}
	*p = g
	for first := true; ; {
		name, done, ok := d.member(&first)
		if !ok {
			return false
		}
		if done {
			return true
		}
		var deps []string
		if !d.strings(&deps) {
			return false
		}
		g[string(name)] = deps
	}
}

func (d *decoder) steps(p *map[string]*Step) bool {
	if d.null() {
		*p = nil
		return true
	}
	m := map[string]*Step{}
	*p = m
	for first := true; ; {
		name, done, ok := d.member(&first)
		if !ok {
			return false
		}
		if done {
			return true
		}
		var s *Step
		if !d.step(&s) {
			return false
		}
		m[string(name)] = s
	}
}

func (d *decoder) step(p **Step) bool {
	if d.null() {
		*p = nil
		return true
	}
	s := &Step{}
	*p = s
	for first := true; ; {
		key, done, ok := d.member(&first)
		if !ok {
			return false
		}
		if done {
			return true
		}
		switch string(key) {
		case "status":
			ok = d.str((*string)(&s.Status))
		case "attempts":
			ok = d.integer(&s.Attempts)
		case "started_at":
			ok = d.strPtr(&s.StartedAt)
		case "finished_at":
			ok = d.strPtr(&s.FinishedAt)
		case "output":
			ok = d.output(&s.Output)
		case "input_fingerprint":
			ok = d.strPtr(&s.InputFingerprint)
		case "versions":
			ok = d.versions(&s.Versions)
		case "token":
			ok = d.uint64Ptr(&s.Token)
		case "effects":
			ok = d.effects(&s.Effects)
		case "parked":
			ok = d.parked(&s.Parked)
		case "parked_count":
			ok = d.integer(&s.ParkedCount)
		case "parked_artifact":
			ok = d.output(&s.ParkedArtifact)
		case "last_error":
			ok = d.strPtr(&s.LastError)
		default:
			ok = false
		}
		if !ok {
			return false
		}
	}
}

func (d *decoder) output(p **Output) bool {
	if d.null() {
		*p = nil
		return true
	}
	o := &Output{}
	*p = o
	for first := true; ; {
		key, done, ok := d.member(&first)
		if !ok {
			return false
		}
		if done {
			return true
		}
		switch string(key) {
		case "object":
			ok = d.str(&o.Object)
		case "inline":
			ok = d.raw(&o.Inline)
		case "digest":
			ok = d.str(&o.Digest)
		case "size":
			ok = d.integer64(&o.Size)
		default:
			ok = false
		}
		if !ok {
			return false
		}
	}
}

func (d *decoder) versions(v *Versions) bool {
	for first := true; ; {
		key, done, ok := d.member(&first)
		if !ok {
			return false
		}
		if done {
			return true
		}
		switch string(key) {
		case "code":
			ok = d.strPtr(&v.Code)
		case "prompt":
			ok = d.strPtr(&v.Prompt)
		case "schema":
			ok = d.strPtr(&v.Schema)
		case "model":
			ok = d.strPtr(&v.Model)
		default:
			ok = false
		}
		if !ok {
			return false
		}
	}
}

func (d *decoder) effects(p **Effects) bool {
	if d.null() {
		*p = nil
		return true
	}
	e := &Effects{}
	*p = e
	for first := true; ; {
		key, done, ok := d.member(&first)
		if !ok {
			return false
		}
		if done {
			return true
		}
		switch string(key) {
		case "keys":
			ok = d.integer(&e.Keys)
		case "intents_open":
			ok = d.integer(&e.IntentsOpen)
		default:
			ok = false
		}
		if !ok {
			return false
		}
	}
}

func (d *decoder) parked(p *[]Parked) bool {
	if d.null() {
		*p = nil
		return true
	}
	out := []Parked{}
	for first := true; ; {
		done, ok := d.element(&first)
		if !ok {
			return false
		}
		if done {
			*p = out
			return true
		}
		var it Parked
		for mfirst := true; ; {
			key, done, ok := d.member(&mfirst)
			if !ok {
				return false
			}
			if done {
				break
			}
			switch string(key) {
			case "item":
				ok = d.str(&it.Item)
			case "reason":
				ok = d.str(&it.Reason)
			default:
				ok = false
			}
			if !ok {
				return false
			}
		}
		out = append(out, it)
	}
}

func (d *decoder) lease(p **Lease) bool {
	if d.null() {
		*p = nil
		return true
	}
	l := &Lease{}
	*p = l
	for first := true; ; {
		key, done, ok := d.member(&first)
		if !ok {
			return false
		}
		if done {
			return true
		}
		switch string(key) {
		case "owner":
			ok = d.str(&l.Owner)
		case "owner_inbox":
			ok = d.str(&l.OwnerInbox)
		case "token":
			var err error
			l.Token, err = strconv.ParseUint(d.number(), 10, 64)
			ok = err == nil
		case "step":
			ok = d.str(&l.Step)
		case "write_id":
			ok = d.str(&l.WriteID)
		default:
			ok = false
		}
		if !ok {
			return false
		}
	}
}

func (d *decoder) approval(p **Approval) bool {
	if d.null() {
		*p = nil
		return true
	}
	a := &Approval{}
	*p = a
	for first := true; ; {
		key, done, ok := d.member(&first)
		if !ok {
			return false
		}
		if done {
			return true
		}
		switch string(key) {
		case "step":
			ok = d.str(&a.Step)
		case "plan_digest":
			ok = d.str(&a.PlanDigest)
		case "since":
			ok = d.str(&a.Since)
		case "by":
			ok = d.strPtr(&a.By)
		case "at":
			ok = d.strPtr(&a.At)
		case "sig":
			ok = d.strPtr(&a.Sig)
		default:
			ok = false
		}
		if !ok {
			return false
		}
	}
}

func (d *decoder) progress(p **Progress) bool {
	if d.null() {
		*p = nil
		return true
	}
	g := &Progress{}
	*p = g
	for first := true; ; {
		key, done, ok := d.member(&first)
		if !ok {
			return false
		}
		if done {
			return true
		}
		switch string(key) {
		case "step":
			ok = d.str(&g.Step)
		case "count":
			ok = d.integer(&g.Count)
		case "no_progress":
			ok = d.integer(&g.NoProgress)
		default:
			ok = false
		}
		if !ok {
			return false
		}
	}
}

func (d *decoder) undo(p **Undo) bool {
	if d.null() {
		*p = nil
		return true
	}
	u := &Undo{}
	*p = u
	for first := true; ; {
		key, done, ok := d.member(&first)
		if !ok {
			return false
		}
		if done {
			return true
		}
		switch string(key) {
		case "request_id":
			ok = d.str(&u.RequestID)
		case "scope":
			ok = d.raw(&u.Scope)
		case "cursor":
			ok = d.integer(&u.Cursor)
		case "reversed":
			ok = d.integer(&u.Reversed)
		case "total":
			ok = d.integer(&u.Total)
		case "previous_status":
			ok = d.str((*string)(&u.PreviousStatus))
		default:
			ok = false
		}
		if !ok {
			return false
		}
	}
}

func (d *decoder) commands(p *[]Command) bool {
	if d.null() {
		*p = nil
		return true
	}
	out := []Command{}
	for first := true; ; {
		done, ok := d.element(&first)
		if !ok {
			return false
		}
		if done {
			*p = out
			return true
		}
		var c Command
		for mfirst := true; ; {
			key, done, ok := d.member(&mfirst)
			if !ok {
				return false
			}
			if done {
				break
			}
			switch string(key) {
			case "verb":
				ok = d.str(&c.Verb)
			case "request_id":
				ok = d.str(&c.RequestID)
			case "by":
				ok = d.str(&c.By)
			case "at":
				ok = d.str(&c.At)
			case "args":
				ok = d.raw(&c.Args)
				if ok && string(c.Args) == "null" {
					c.Args = nil
				}
			default:
				ok = false
			}
			if !ok {
				return false
			}
		}
		out = append(out, c)
	}
}
