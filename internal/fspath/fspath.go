// Package fspath holds the path questions that backup, restore and the
// commands ask of a state directory and a destination: whether one path
// lies inside another ([Inside]), compared as the file system sees them
// ([Real]: absolute, symbolic links resolved as far as the path exists),
// and the names of the hidden folders a destination is built in before it
// is renamed into place ([Partial], [StalePartials]).
package fspath

import (
	"path/filepath"
	"strings"
)

// Inside reports whether p is dir or lies under it, both taken as [Real]
// gives them: a path that reaches dir through a symbolic link, or through
// ".." elements, is inside it too. Neither needs to exist.
func Inside(dir, p string) (bool, error) {
	d, err := Real(dir)
	if err != nil {
		return false, err
	}
	q, err := Real(p)
	if err != nil {
		return false, err
	}
	return Under(d, q), nil
}

// Under reports whether the clean path p is dir or lies under it, by
// their names alone (no file system access): both absolute, or both
// relative to the same directory.
func Under(dir, p string) bool {
	rel, err := filepath.Rel(dir, p)
	if err != nil {
		return false
	}
	return rel == "." || rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}

// Real returns p absolute and clean, with the symbolic links of its
// longest existing prefix resolved; the part that does not exist yet is
// joined on as it is named.
func Real(p string) (string, error) {
	a, err := filepath.Abs(p)
	if err != nil {
		return "", err
	}
	rest := ""
	for cur := a; ; {
		if r, err := filepath.EvalSymlinks(cur); err == nil {
			return filepath.Join(r, rest), nil
		}
		parent := filepath.Dir(cur)
		if parent == cur {
			return a, nil
		}
		rest = filepath.Join(filepath.Base(cur), rest)
		cur = parent
	}
}
