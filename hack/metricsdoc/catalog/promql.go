package catalog

import (
	"fmt"
	"sort"
	"strings"
)

// aggregators and keywords are PromQL words that are never metric names.
var (
	aggregators = set("sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values",
		"bottomk", "topk", "quantile", "limitk", "limit_ratio")
	operators = set("and", "or", "unless", "bool", "offset", "atan2", "inf", "nan")
	// labelListKeywords are followed by a parenthesised label list.
	labelListKeywords = set("by", "without", "on", "ignoring", "group_left", "group_right")
)

func set(words ...string) map[string]bool {
	m := map[string]bool{}
	for _, w := range words {
		m[w] = true
	}
	return m
}

// MetricNames returns the metric names a PromQL expression selects, sorted
// and without duplicates: identifiers outside label matchers, strings,
// durations and label lists that are not functions, aggregations or
// keywords. Grafana variables ($var, ${var}) are skipped. It does not
// validate the expression (promtool does); it fails on unbalanced brackets
// and unterminated strings.
func MetricNames(expr string) ([]string, error) {
	found := map[string]bool{}
	s := expr
	i, parens := 0, 0
	for i < len(s) {
		c := s[i]
		switch {
		case c == '"' || c == '\'' || c == '`':
			end, err := skipString(s, i)
			if err != nil {
				return nil, err
			}
			i = end
		case c == '{':
			end, err := skipBalanced(s, i, '{', '}')
			if err != nil {
				return nil, err
			}
			i = end
		case c == '[':
			end, err := skipBalanced(s, i, '[', ']')
			if err != nil {
				return nil, err
			}
			i = end
		case c == '#':
			for i < len(s) && s[i] != '\n' {
				i++
			}
		case c == '$':
			i++
			if i < len(s) && s[i] == '{' {
				end, err := skipBalanced(s, i, '{', '}')
				if err != nil {
					return nil, err
				}
				i = end
				continue
			}
			for i < len(s) && isIdentChar(s[i]) {
				i++
			}
		case isDigit(c) || (c == '.' && i+1 < len(s) && isDigit(s[i+1])):
			for i < len(s) && (isIdentChar(s[i]) || s[i] == '.') {
				i++
			}
		case isIdentStart(c):
			start := i
			for i < len(s) && isIdentChar(s[i]) {
				i++
			}
			word := s[start:i]
			next := nextNonSpace(s, i)
			lower := strings.ToLower(word)
			switch {
			case labelListKeywords[lower]:
				if next < len(s) && s[next] == '(' {
					end, err := skipBalanced(s, next, '(', ')')
					if err != nil {
						return nil, err
					}
					i = end
				}
			case aggregators[lower], operators[lower]:
			case next < len(s) && s[next] == '(':
				// A function call.
			default:
				found[word] = true
			}
		case c == '(':
			parens++
			i++
		case c == ')':
			parens--
			if parens < 0 {
				return nil, fmt.Errorf("unbalanced ')' at offset %d in %q", i, expr)
			}
			i++
		case c == '}' || c == ']':
			return nil, fmt.Errorf("unbalanced %q at offset %d in %q", c, i, expr)
		default:
			i++
		}
	}
	if parens != 0 {
		return nil, fmt.Errorf("unbalanced '(' in %q", expr)
	}
	out := make([]string, 0, len(found))
	for n := range found {
		out = append(out, n)
	}
	sort.Strings(out)
	return out, nil
}

func isDigit(c byte) bool      { return c >= '0' && c <= '9' }
func isIdentStart(c byte) bool { return c == '_' || c == ':' || (c|0x20 >= 'a' && c|0x20 <= 'z') }
func isIdentChar(c byte) bool  { return isIdentStart(c) || isDigit(c) }

func nextNonSpace(s string, i int) int {
	for i < len(s) && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the offset after the string literal starting at i.
func skipString(s string, i int) (int, error) {
	q := s[i]
	for j := i + 1; j < len(s); j++ {
		switch {
		case s[j] == '\\' && q != '`':
			j++
		case s[j] == q:
			return j + 1, nil
		}
	}
	return 0, fmt.Errorf("unterminated string at offset %d in %q", i, s)
}

// skipBalanced returns the offset after the bracket opened at i, skipping
// strings and nested brackets of the same kind.
func skipBalanced(s string, i int, open, closing byte) (int, error) {
	depth := 0
	for j := i; j < len(s); j++ {
		switch s[j] {
		case '"', '\'', '`':
			end, err := skipString(s, j)
			if err != nil {
				return 0, err
			}
			j = end - 1
		case open:
			depth++
		case closing:
			depth--
			if depth == 0 {
				return j + 1, nil
			}
		}
	}
	return 0, fmt.Errorf("unbalanced %q at offset %d in %q", open, i, s)
}
