//! Validation: a [`WorkflowSpec`] checked into the [`Workflow`] the engine
//! runs, every problem collected with its location.

use super::*;
impl Workflow {
    /// Checks a spec, resolving plugins through `catalog`. All problems are
    /// collected, not just the first.
    pub fn validate(spec: WorkflowSpec, catalog: &dyn PluginCatalog) -> Result<Workflow, Invalid> {
        let mut issues = Vec::new();
        let mut push = |location: String, message: String| issues.push(Issue { location, message });

        if !valid_name(&spec.name) {
            push("name".into(), format!("`{}` is not a valid name: {NAME_RULE}", spec.name));
        }
        if spec.tasks.is_empty() {
            push("tasks".into(), "a workflow needs at least one task".into());
        }
        if spec.max_active_runs == Some(0) {
            push("max_active_runs".into(), "must be at least 1".into());
        }
        if spec.concurrency == Some(0) {
            push("concurrency".into(), "must be at least 1".into());
        }
        for name in spec.params.keys() {
            if !valid_name(name) {
                push(format!("params.{name}"), format!("`{name}` is not a valid param name: {NAME_RULE}"));
            }
        }

        let mut index = HashMap::new();
        for (i, task) in spec.tasks.iter().enumerate() {
            if !valid_name(&task.name) {
                push(format!("tasks[{i}].name"), format!("`{}` is not a valid task name: {NAME_RULE}", task.name));
            }
            if let Some(first) = index.insert(task.name.clone(), i) {
                push(
                    format!("tasks[{i}].name"),
                    format!("duplicate task name `{}` (first used by tasks[{first}])", task.name),
                );
                index.insert(task.name.clone(), first);
            }
        }

        let mut tasks = Vec::with_capacity(spec.tasks.len());
        for (i, t) in spec.tasks.iter().enumerate() {
            let at = |field: &str| format!("tasks[{i}].{field}");
            let mut deps = Vec::new();
            let mut seen = HashSet::new();
            for (j, dep) in t.depends_on.iter().enumerate() {
                match index.get(dep) {
                    None => push(at(&format!("depends_on[{j}]")), format!("unknown task `{dep}`")),
                    Some(&d) if d == i => {
                        push(at(&format!("depends_on[{j}]")), "a task cannot depend on itself".into())
                    }
                    Some(&d) => {
                        if seen.insert(d) {
                            deps.push(d);
                        } else {
                            push(at(&format!("depends_on[{j}]")), format!("`{dep}` is listed twice"));
                        }
                    }
                }
            }
            let kinds = [t.plugin.is_some(), t.workflow.is_some(), t.switch.is_some()];
            if kinds.iter().filter(|k| **k).count() != 1 {
                push(format!("tasks[{i}]"), "a task has exactly one of `plugin`, `workflow` and `switch`".into());
            }
            let plugin = match &t.plugin {
                None => None,
                Some(text) => match PluginRef::parse(text) {
                    Ok(p) => Some(p),
                    Err(e) => {
                        push(at("plugin"), e);
                        None
                    }
                },
            };
            let resolved = plugin.as_ref().and_then(|p| match catalog.resolve(&p.name, p.version.as_deref()) {
                Ok(r) => Some(r),
                Err(e) => {
                    push(at("plugin"), e);
                    None
                }
            });
            let dep_names: HashSet<&str> = t.depends_on.iter().map(String::as_str).collect();
            let scope = TemplateScope { params: &spec.params, upstream: &dep_names };
            let params = match Template::parse(&t.params) {
                Ok(tpl) => {
                    for problem in tpl.check(&scope) {
                        push(format!("tasks[{i}].params{}", problem.location), problem.message);
                    }
                    tpl
                }
                Err(problem) => {
                    push(format!("tasks[{i}].params{}", problem.location), problem.message);
                    Template::literal(t.params.clone())
                }
            };
            if let Some(schema) = resolved.as_ref().and_then(|r| r.params_schema.as_ref()) {
                for (location, message) in check_schema(schema, &t.params, &params) {
                    push(format!("tasks[{i}].params{location}"), message);
                }
            }
            for (j, host) in t.allow_hosts.iter().enumerate() {
                if let Some(problem) = check_host_pattern(host) {
                    push(at(&format!("allow_hosts[{j}]")), problem);
                }
            }
            let backoff = match &t.retry_backoff {
                None => Backoff::default(),
                Some(b) => {
                    let max = b.max.map(|m| m.0).unwrap_or(Duration::from_secs(3600));
                    if max < b.delay.0 {
                        push(at("retry_backoff.max"), "must not be shorter than the delay".into());
                    }
                    Backoff { kind: b.kind, delay: b.delay.0, max }
                }
            };
            if t.timeout.is_some_and(|d| d.0.is_zero()) {
                push(at("timeout"), "must be longer than zero".into());
            }
            if let Some(warn) = t.timeout_warn {
                if warn.0.is_zero() {
                    push(at("timeout_warn"), "must be longer than zero".into());
                } else if t.timeout.is_some_and(|d| warn.0 >= d.0) {
                    push(at("timeout_warn"), "must be shorter than the task's `timeout`".into());
                }
            }
            if t.worker_group.as_deref().is_some_and(|g| !valid_name(g)) {
                push(at("worker_group"), format!("not a valid worker group: {NAME_RULE}"));
            }
            if t.memory.is_some_and(|m| m.0 < (1 << 20)) {
                push(at("memory"), "must be at least 1MiB".into());
            }
            let kind = match (&t.workflow, &t.switch) {
                (Some(child), _) => {
                    if !valid_name(child) {
                        push(at("workflow"), format!("`{child}` is not a valid workflow name"));
                    }
                    TaskKind::Workflow { name: child.clone() }
                }
                (None, Some(sw)) => {
                    let depends_on = |d: usize| spec.tasks.get(d).is_some_and(|o| o.depends_on.contains(&t.name));
                    match validate_switch(sw, i, &index, &depends_on) {
                        Ok(Switch { cases, default, .. }) => {
                            let on = match Template::parse(&Value::String(sw.on.clone())) {
                                Ok(tpl) => {
                                    for problem in tpl.check(&scope) {
                                        push(at("switch.on"), problem.message);
                                    }
                                    tpl
                                }
                                Err(problem) => {
                                    push(at("switch.on"), problem.message);
                                    Template::literal(Value::Null)
                                }
                            };
                            TaskKind::Switch(Box::new(Switch { on, cases, default }))
                        }
                        Err(problems) => {
                            for (location, message) in problems {
                                push(at(&format!("switch.{location}")), message);
                            }
                            TaskKind::Plugin
                        }
                    }
                }
                (None, None) => TaskKind::Plugin,
            };
            let when = t.when.as_ref().map(|text| match Template::parse(&Value::String(text.clone())) {
                Ok(tpl) => {
                    for problem in tpl.check(&scope) {
                        push(at("when"), problem.message);
                    }
                    tpl
                }
                Err(problem) => {
                    push(at("when"), problem.message);
                    Template::literal(Value::Bool(true))
                }
            });
            let mut upstream = Vec::new();
            for (j, u) in t.upstream.iter().enumerate() {
                match Upstream::new(u) {
                    Ok(u) => upstream.push(u),
                    Err((field, message)) => push(at(&format!("upstream[{j}].{field}")), message),
                }
            }
            let sensor = match &t.sensor {
                None => None,
                Some(spec_s) => {
                    if t.plugin.is_none() {
                        push(at("sensor"), "only a plugin task can be a sensor".into());
                    }
                    match Sensor::new(spec_s) {
                        Ok(s) => Some(s),
                        Err((field, message)) => {
                            push(at(&format!("sensor.{field}")), message);
                            None
                        }
                    }
                }
            };
            tasks.push(Task {
                name: t.name.clone(),
                plugin: match resolved {
                    Some(r) => PluginRef { name: r.name, version: plugin.and_then(|p| p.version) },
                    None => plugin.unwrap_or(PluginRef { name: t.plugin.clone().unwrap_or_default(), version: None }),
                },
                params,
                deps,
                dependents: Vec::new(),
                retries: t.retries,
                backoff,
                timeout: t.timeout.map(|d| d.0),
                timeout_warn: t.timeout_warn.map(|d| d.0),
                priority: t.priority,
                trigger_rule: t.trigger_rule,
                allow_hosts: t.allow_hosts.clone(),
                memory: t.memory.map(|m| m.0),
                worker_group: t.worker_group.clone(),
                kind,
                when: when.map(Box::new),
                enabled: t.enabled,
                upstream,
                sensor: sensor.map(Box::new),
            });
        }

        if let Some(cycle) = find_cycle(&tasks) {
            let path: Vec<&str> = cycle.iter().map(|&i| tasks[i].name.as_str()).collect();
            push(format!("tasks[{}].depends_on", cycle[0]), format!("dependency cycle: {}", path.join(" -> ")));
        }

        let mut upstream = Vec::new();
        for (j, u) in spec.upstream.iter().enumerate() {
            match Upstream::new(u) {
                Ok(u) => upstream.push(u),
                Err((field, message)) => push(format!("upstream[{j}].{field}"), message),
            }
        }
        if spec.grade > 3 {
            push("grade".into(), format!("{} is not a grade: use 0 (the default) to 3", spec.grade));
        }
        if spec.timeout.is_some_and(|d| d.0.is_zero()) {
            push("timeout".into(), "must be longer than zero".into());
        }
        let schedule = match &spec.schedule {
            None => None,
            Some(s) => match Schedule::new(s) {
                Ok(schedule) => Some(schedule),
                Err(problem) => {
                    push(format!("schedule.{}", problem.location), problem.message);
                    None
                }
            },
        };

        let sla = match &spec.sla {
            None => None,
            Some(s) => match crate::sla::Sla::new(s, schedule.as_ref().map(|s| s.timezone)) {
                Ok(sla) => Some(sla),
                Err((field, message)) => {
                    push(if field.is_empty() { "sla".into() } else { format!("sla.{field}") }, message);
                    None
                }
            },
        };

        if !issues.is_empty() {
            return Err(Invalid { issues });
        }
        for i in 0..tasks.len() {
            for d in tasks[i].deps.clone() {
                tasks[d].dependents.push(i);
            }
        }
        for task in &mut tasks {
            task.dependents.shrink_to_fit();
        }
        let timeout = spec.timeout.map(|d| d.0);
        // The tasks live on validated, in `tasks`; the spec's copies would
        // more than double what a large workflow holds (a validated
        // workflow is kept for as long as its runs go on).
        let mut spec = spec;
        spec.tasks = Vec::new();
        Ok(Workflow { spec, tasks, schedule, upstream, timeout, sla, index })
    }

    /// Merges trigger-time overrides into the workflow's params. Unknown
    /// params are an error (a typo must not silently do nothing).
    pub fn resolve_params(
        &self,
        overrides: &serde_json::Map<String, Value>,
    ) -> Result<BTreeMap<String, Value>, Invalid> {
        let mut params = self.spec.params.clone();
        let mut issues = Vec::new();
        for (name, value) in overrides {
            match params.get_mut(name) {
                Some(slot) => *slot = value.clone(),
                None => issues.push(Issue {
                    location: format!("params.{name}"),
                    message: format!(
                        "unknown param `{name}`; the workflow declares: {}",
                        if self.spec.params.is_empty() {
                            "none".to_owned()
                        } else {
                            self.spec.params.keys().cloned().collect::<Vec<_>>().join(", ")
                        }
                    ),
                }),
            }
        }
        if issues.is_empty() { Ok(params) } else { Err(Invalid { issues }) }
    }
}

/// Checks literal params against the plugin's schema. Values that contain
/// templates are only known at run time, so errors inside them are not
/// reported now.
fn check_schema(schema: &Value, raw: &Value, template: &Template) -> Vec<(String, String)> {
    let validator = match jsonschema::validator_for(schema) {
        Ok(v) => v,
        Err(e) => {
            return vec![(String::new(), format!("the plugin's params schema is invalid: {e}"))];
        }
    };
    let templated = template.templated_pointers();
    validator
        .iter_errors(raw)
        .filter_map(|error| {
            let pointer = error.instance_path().as_str().to_owned();
            if templated
                .iter()
                .any(|t| pointer.starts_with(t.as_str()) || t.starts_with(&pointer) && !pointer.is_empty())
            {
                return None;
            }
            Some((pointer_to_location(&pointer), format!("does not match the plugin's schema: {error}")))
        })
        .collect()
}

/// `/a/0/b` → `.a[0].b`
pub(crate) fn pointer_to_location(pointer: &str) -> String {
    let mut out = String::new();
    for segment in pointer.split('/').skip(1) {
        let segment = segment.replace("~1", "/").replace("~0", "~");
        if segment.parse::<usize>().is_ok() {
            out.push_str(&format!("[{segment}]"));
        } else {
            out.push('.');
            out.push_str(&segment);
        }
    }
    out
}

/// The same rules as the runtime's allowlist parser, kept here so that a
/// definition (or a tenant's limits) is rejected when it is submitted rather
/// than at run time. `None` when `host` is a valid allowlist entry.
pub fn check_host_pattern(host: &str) -> Option<String> {
    let host = host.trim();
    if host.is_empty() {
        return Some("an allowed host cannot be empty".into());
    }
    if host.contains("://") || host.contains('/') {
        return Some(format!("`{host}` must be a host name, optionally with :port, not a URL"));
    }
    let (name, port) = if host.starts_with('[') {
        match host.find(']') {
            Some(end) => (&host[1..end], host[end + 1..].strip_prefix(':')),
            None => return Some(format!("`{host}` has an unclosed `[`")),
        }
    } else if host.matches(':').count() > 1 {
        (host, None)
    } else {
        match host.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (host, None),
        }
    };
    if let Some(port) = port
        && port.parse::<u16>().is_err()
    {
        return Some(format!("`{host}` has a bad port `{port}`"));
    }
    if name.parse::<std::net::IpAddr>().is_ok() {
        return None;
    }
    let name = name.strip_prefix("*.").unwrap_or(name);
    let ok = !name.is_empty()
        && name
            .split('.')
            .all(|l| !l.is_empty() && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'));
    if ok { None } else { Some(format!("`{host}` is not a valid host name")) }
}

/// Whether allowlist entry `entry` is within allowlist entry `by`: the same
/// host (or an IP literal), or under `by`'s `*.` wildcard; and `by`'s port,
/// if it names one, is `entry`'s port too. Used to keep a task's
/// `allow_hosts` within its tenant's. `*` covers every entry (a tenant
/// that may reach whatever its tasks list).
pub fn host_covered(entry: &str, by: &str) -> bool {
    fn split(s: &str) -> (String, Option<&str>) {
        let s = s.trim();
        if let Some(rest) = s.strip_prefix('[')
            && let Some(end) = rest.find(']')
        {
            return (rest[..end].to_ascii_lowercase(), rest[end + 1..].strip_prefix(':'));
        }
        if s.matches(':').count() > 1 {
            return (s.to_ascii_lowercase(), None);
        }
        match s.rsplit_once(':') {
            Some((h, p)) => (h.to_ascii_lowercase(), Some(p)),
            None => (s.to_ascii_lowercase(), None),
        }
    }
    if by.trim() == "*" {
        return true;
    }
    let (host, port) = split(entry);
    let (by_host, by_port) = split(by);
    if by_port.is_some() && by_port != port {
        return false;
    }
    if host == by_host {
        return true;
    }
    match by_host.strip_prefix("*.") {
        Some(suffix) => {
            let name = host.strip_prefix("*.").unwrap_or(&host);
            name.len() > suffix.len() && name.ends_with(&format!(".{suffix}"))
        }
        None => false,
    }
}

/// Finds a dependency cycle, as a path that starts and ends at the same task.
fn find_cycle(tasks: &[Task]) -> Option<Vec<usize>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        New,
        OnPath,
        Done,
    }
    let mut mark = vec![Mark::New; tasks.len()];
    for start in 0..tasks.len() {
        if mark[start] != Mark::New {
            continue;
        }
        // Iterative DFS over `deps`; `path` holds (node, next dep to visit).
        let mut path: Vec<(usize, usize)> = vec![(start, 0)];
        mark[start] = Mark::OnPath;
        while let Some(&mut (node, ref mut next)) = path.last_mut() {
            if let Some(&dep) = tasks[node].deps.get(*next) {
                *next += 1;
                match mark[dep] {
                    Mark::New => {
                        mark[dep] = Mark::OnPath;
                        path.push((dep, 0));
                    }
                    Mark::OnPath => {
                        // `dep` is on the path: the cycle is dep … node → dep.
                        let from = path.iter().position(|&(n, _)| n == dep).unwrap_or(0);
                        let mut cycle: Vec<usize> = path[from..].iter().map(|&(n, _)| n).collect();
                        cycle.push(dep);
                        // Print it in the direction work flows: dep before dependent.
                        cycle.reverse();
                        return Some(cycle);
                    }
                    Mark::Done => {}
                }
            } else {
                mark[node] = Mark::Done;
                path.pop();
            }
        }
    }
    None
}
