// Command validate checks Ember's deployment files (deploy/) the way the
// tools that run them would read them, and then some rules of our own:
//
//	validate -k8s DIR [-configs OUT]    every YAML document in DIR, decoded
//	                                    strictly into the Kubernetes API types
//	validate -compose FILE -services a,b  the compose file, loaded strictly
//	                                    with compose-go (the Compose spec's
//	                                    schema and consistency checks)
//	validate -dockerfile FILE           the images the Dockerfile builds from
//
// Flags combine. Every problem found is printed as one line
// "FILE: what is wrong"; the exit status is 0 when there is none, 1 when
// there is any, 2 for bad usage. -configs writes each ConfigMap entry whose
// key ends in .conf to OUT/<configmap>/<key>, so test_deploy can have the
// real ember-agent and ember-collector check their keys.
//
// tests/deploy/test_deploy.sh runs it on deploy/ and on broken copies of
// deploy/ that it must reject.
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
)

// problems collects what is wrong, in the order found.
type problems struct {
	lines []string
}

func (p *problems) add(file, format string, args ...any) {
	p.lines = append(p.lines, file+": "+fmt.Sprintf(format, args...))
}

func main() {
	k8sDir := flag.String("k8s", "", "directory of Kubernetes manifests (*.yaml)")
	configs := flag.String("configs", "", "write the .conf entries of the ConfigMaps under this directory")
	compose := flag.String("compose", "", "compose file")
	services := flag.String("services", "", "comma-separated services the compose file must define")
	dockerfile := flag.String("dockerfile", "", "Dockerfile")
	flag.Parse()
	if flag.NArg() != 0 || (*k8sDir == "" && *compose == "" && *dockerfile == "") {
		fmt.Fprintln(os.Stderr, "usage: validate [-k8s DIR [-configs OUT]] [-compose FILE [-services a,b]] [-dockerfile FILE]")
		os.Exit(2)
	}
	var p problems
	summary := []string{}
	if *k8sDir != "" {
		n := checkKubernetes(*k8sDir, *configs, &p)
		summary = append(summary, fmt.Sprintf("%d Kubernetes objects", n))
	}
	if *compose != "" {
		var want []string
		if *services != "" {
			want = strings.Split(*services, ",")
		}
		n := checkCompose(*compose, want, &p)
		summary = append(summary, fmt.Sprintf("%d compose services", n))
	}
	if *dockerfile != "" {
		n := checkDockerfile(*dockerfile, &p)
		summary = append(summary, fmt.Sprintf("%d Dockerfile stages", n))
	}
	for _, l := range p.lines {
		fmt.Println(l)
	}
	if len(p.lines) > 0 {
		fmt.Printf("validate: %d problems\n", len(p.lines))
		os.Exit(1)
	}
	fmt.Printf("validate: ok (%s)\n", strings.Join(summary, ", "))
}
