package main

import (
	"bufio"
	"context"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"
)

// checkCompose loads a compose file with compose-go, as docker compose
// does: the Compose spec's JSON schema (an unknown or misspelt key, a value
// of the wrong type is an error), interpolation, and its consistency checks
// (a service naming an undefined volume, network or dependency). Then the
// rules below. Returns the number of services.
func checkCompose(file string, want []string, p *problems) int {
	abs, err := filepath.Abs(file)
	if err != nil {
		p.add(file, "%v", err)
		return 0
	}
	// No environment of the caller's: interpolation takes the defaults
	// written in the file (${VAR:-default}), so the result is the same on
	// every machine.
	opts, err := cli.NewProjectOptions([]string{abs},
		cli.WithWorkingDirectory(filepath.Dir(abs)),
		cli.WithResolvedPaths(true),
		cli.WithConsistency(true),
		cli.WithInterpolation(true))
	if err != nil {
		p.add(file, "%v", err)
		return 0
	}
	project, err := opts.LoadProject(context.Background())
	if err != nil {
		p.add(file, "%v", err)
		return 0
	}
	for _, name := range want {
		if _, ok := project.Services[name]; !ok {
			p.add(file, "no service %q", name)
		}
	}
	names := make([]string, 0, len(project.Services))
	for name := range project.Services {
		names = append(names, name)
	}
	sort.Strings(names)
	published := map[string]string{}
	writers := map[string]string{}
	groups := map[string]string{} // collector service -> group_id
	for _, name := range names {
		s := project.Services[name]
		where := "service " + name
		checkImage(file, where, s.Image, p)
		for _, port := range s.Ports {
			if port.Published == "" {
				continue
			}
			key := port.HostIP + ":" + port.Published + "/" + port.Protocol
			if other, dup := published[key]; dup {
				p.add(file, "%s publishes %s, as %s does", where, key, other)
			}
			published[key] = name
		}
		var conf string
		for _, v := range s.Volumes {
			switch v.Type {
			case types.VolumeTypeVolume:
				if _, ok := project.Volumes[v.Source]; !ok && v.Source != "" {
					p.add(file, "%s mounts volume %q, which is not defined", where, v.Source)
				}
				if !v.ReadOnly && v.Source != "" {
					if other, dup := writers[v.Source]; dup {
						p.add(file, "%s and %s both mount volume %q read-write", other, where, v.Source)
					}
					writers[v.Source] = name
				}
			case types.VolumeTypeBind:
				if _, err := os.Stat(v.Source); err != nil {
					p.add(file, "%s binds %s, which does not exist", where, v.Source)
				}
				if strings.HasPrefix(v.Target, "/etc/ember/") && strings.HasSuffix(v.Target, ".conf") {
					conf = v.Source
				}
			}
		}
		cmd := []string(s.Command)
		if len(cmd) == 0 {
			continue
		}
		switch filepath.Base(cmd[0]) {
		case "ember-collector":
			groups[name] = configValue(conf, "group_id", "ember-collector")
		case "ember-agent":
			if s.Pid != "host" {
				p.add(file, "%s runs ember-agent without pid: host (it would see only itself)", where)
			}
			if !contains(s.CapAdd, "PERFMON") && !contains(s.CapAdd, "CAP_PERFMON") {
				p.add(file, "%s runs ember-agent without cap_add PERFMON (perf_event_open)", where)
			}
			if s.Privileged {
				p.add(file, "%s runs ember-agent privileged", where)
			}
		}
	}
	if len(groups) < 2 {
		p.add(file, "%d services run ember-collector; want at least 2 in one group", len(groups))
	}
	group := ""
	for _, name := range sortedKeys(groups) {
		if group == "" {
			group = groups[name]
		} else if groups[name] != group {
			p.add(file, "service %s is in group %q, the other collectors in %q", name, groups[name], group)
		}
	}
	return len(project.Services)
}

// configValue reads key from an Ember config file (key = value lines).
func configValue(path, key, def string) string {
	if path == "" {
		return def
	}
	f, err := os.Open(path)
	if err != nil {
		return def
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if ok && strings.TrimSpace(k) == key {
			def = strings.TrimSpace(v)
		}
	}
	return def
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
