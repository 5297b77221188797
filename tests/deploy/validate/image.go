package main

import (
	"bufio"
	"os"
	"strconv"
	"strings"
)

// imageHost returns the registry host an image reference names, or "" when
// it names none (the runtime's default registry, or a local image). As in
// the Docker reference grammar, the first path component is a host when it
// holds a '.' or a ':' or is "localhost". Ember's files name no registry:
// images are built from deploy/docker/Dockerfile or pulled by their plain
// name from wherever the operator's runtime is set to pull.
func imageHost(ref string) string {
	slash := strings.IndexByte(ref, '/')
	if slash < 0 {
		return ""
	}
	first := ref[:slash]
	if strings.ContainsAny(first, ".:") || first == "localhost" {
		return first
	}
	return ""
}

// checkImage adds a problem when ref is empty or names a registry host.
func checkImage(file, where, ref string, p *problems) {
	if ref == "" {
		p.add(file, "%s: no image", where)
		return
	}
	if h := imageHost(ref); h != "" {
		p.add(file, "%s: image %q names the registry host %q (name images without a registry)", where, ref, h)
	}
}

// checkDockerfile checks every FROM of a Dockerfile: the image it builds
// from (not an earlier stage) names no registry host. Returns the number of
// stages.
func checkDockerfile(path string, p *problems) int {
	f, err := os.Open(path)
	if err != nil {
		p.add(path, "%v", err)
		return 0
	}
	defer f.Close()
	stages := map[string]bool{}
	n := 0
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 || !strings.EqualFold(fields[0], "FROM") {
			continue
		}
		n++
		args := fields[1:]
		for len(args) > 0 && strings.HasPrefix(args[0], "--") {
			args = args[1:] // --platform=...
		}
		if len(args) == 0 {
			p.add(path, "line %d: FROM without an image", line)
			continue
		}
		if !stages[strings.ToLower(args[0])] {
			checkImage(path, "line "+strconv.Itoa(line), args[0], p)
		}
		if len(args) == 3 && strings.EqualFold(args[1], "AS") {
			stages[strings.ToLower(args[2])] = true
		}
	}
	if err := sc.Err(); err != nil {
		p.add(path, "%v", err)
	}
	if n == 0 {
		p.add(path, "no FROM line")
	}
	return n
}
