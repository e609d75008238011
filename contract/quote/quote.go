// Package quote shortens user input quoted in error messages, so that a
// hostile value (a megabyte-long field or meta value) gives a short
// message. It is shared by every parser of the project.
package quote

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

// Cut returns s cut to at most n bytes at a rune boundary, marked with
// "..." when it was cut.
func Cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}

// MaxJSONError bounds the message of a decoding error from JSONError:
// encoding/json quotes unknown field names and number literals whole.
const MaxJSONError = 200

// JSONError makes a JSON decoding error of an n-byte input short and
// locates it: at its byte offset when encoding/json knows it, else at off
// (where decoding stopped; off < 0: unknown). A syntax error at the very
// end, or an EOF, is reported as the end of the input (encoding/json
// would blame an invisible space after a cut number). The original error
// stays available to errors.Is and errors.As.
func JSONError(err error, off int64, n int) error {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn) && atEnd(syn, n):
		return &shortError{msg: fmt.Sprintf("at byte %d: unexpected end of JSON input (truncated document?)", syn.Offset), err: err}
	case errors.As(err, &syn):
		off = syn.Offset
	case errors.As(err, &typ):
		off = typ.Offset
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return &shortError{msg: fmt.Sprintf("at byte %d: unexpected end of JSON input (truncated document?)", n), err: err}
	}
	msg := err.Error()
	if off >= 0 {
		msg = fmt.Sprintf("at byte %d: %s", off, msg)
	}
	return &shortError{msg: Cut(msg, MaxJSONError), err: err}
}

// atEnd reports whether a syntax error of an n-byte input is its end:
// encoding/json reports a cut number as an invalid space at offset n.
func atEnd(syn *json.SyntaxError, n int) bool {
	return syn.Offset >= int64(n) && (strings.HasPrefix(syn.Error(), "unexpected end") || strings.HasPrefix(syn.Error(), "invalid character ' '"))
}

// shortError is an error whose message is a bounded rendering of err's.
type shortError struct {
	msg string
	err error
}

func (e *shortError) Error() string { return e.msg }
func (e *shortError) Unwrap() error { return e.err }
