// The run summary (facts, metric curves, evaluations, steps) and the trajectory list (filters, text search,
// selection, chat JSONL export).

const CHARTS = ['reward/mean', 'success/rate', 'valid/rate', 'turns/mean', 'eval/success', 'eval/reward',
  'entropy', 'loss/policy', 'approx_kl', 'clip_frac', 'grad_norm', 'loss/value', 'tokens_per_s'];

function chart(name, points, steps) {
  // one metric against the step, as an inline SVG line (points only where a metric is sparse, e.g. eval/*);
  // every chart spans the run's steps, so that charts stacked in the grid line up
  const W = 300, H = 150, L = 56, R = 8, T = 20, B = 24;
  const ys = points.map((p) => p[1]);
  let [x0, x1, y0, y1] = [steps[0], steps[1], Math.min(...ys), Math.max(...ys)];
  if (x0 === x1) { x0 -= 1; x1 += 1; }
  if (y0 === y1) { y0 -= 0.5; y1 += 0.5; }
  const X = (x) => L + (W - L - R) * (x - x0) / (x1 - x0);
  const Y = (y) => H - B - (H - T - B) * (y - y0) / (y1 - y0);
  const sparse = name.startsWith('eval/') || points.length < 3;
  const el = svg('svg', {class: 'chart', viewBox: `0 0 ${W} ${H}`, width: W, height: H, data: {metric: name}},
    svg('text', {x: L, y: 13, class: 'ctitle'}, name),
    svg('line', {x1: L, y1: H - B, x2: W - R, y2: H - B, class: 'axis'}),
    svg('line', {x1: L, y1: T, x2: L, y2: H - B, class: 'axis'}),
    svg('text', {x: L - 4, y: T + 4, class: 'tick', 'text-anchor': 'end'}, fmt(y1, 2)),
    svg('text', {x: L - 4, y: H - B, class: 'tick', 'text-anchor': 'end'}, fmt(y0, 2)),
    svg('text', {x: L, y: H - 8, class: 'tick'}, 'step ' + x0),
    svg('text', {x: W - R, y: H - 8, class: 'tick', 'text-anchor': 'end'}, String(x1)));
  if (!sparse) {
    el.appendChild(svg('polyline', {class: 'line', points: points.map((p) => `${X(p[0])},${Y(p[1])}`).join(' ')}));
  }
  for (const [x, y] of points) {
    el.appendChild(svg('circle', {cx: X(x), cy: Y(y), r: sparse ? 3.5 : 2, class: sparse ? 'dot eval' : 'dot'},
      svg('title', null, `step ${x}: ${fmt(y, 4)}`)));
  }
  return el;
}

function series(name) {
  return RUN.metrics.filter((m) => typeof m[name] === 'number').map((m) => [m.step, m[name]]);
}

function stepStats() {
  const by = new Map();
  for (const e of RUN.index) {
    if (!by.has(e.s)) by.set(e.s, []);
    by.get(e.s).push(e);
  }
  return by;
}

VIEWS[''] = async function summary(main, r) {
  main.appendChild(h('h1', null, 'Run ', RUN.name));
  main.appendChild(h('div', {class: 'facts'}, RUN.facts.map(([k, v]) => badge(k, v))));
  for (const note of RUN.notes || []) main.appendChild(h('p', {class: 'warn'}, note));
  for (const [file, n] of Object.entries(RUN.skipped)) {
    main.appendChild(h('p', {class: 'warn'}, `${file}: ${n} malformed or unreadable line(s) skipped`));
  }
  const counts = Object.entries(RUN.pool_counts);
  if (counts.length) {
    main.appendChild(h('p', null, 'Experience pool: ', counts.map(([k, n]) => `${n} ${k}(s)`).join(', ')));
  }
  const keys = new Set(RUN.metrics.flatMap((m) => Object.keys(m)).filter((k) => k !== 'step'));
  const shown = CHARTS.filter((k) => keys.has(k) && series(k).length);
  const extra = r.q.get('metric');
  if (extra && keys.has(extra) && !shown.includes(extra)) shown.push(extra);
  const all = RUN.metrics.map((m) => m.step);
  const span = [Math.min(...all), Math.max(...all)];
  const grid = h('div', {class: 'charts'}, shown.map((k) => chart(k, series(k), span)));
  const others = [...keys].filter((k) => !shown.includes(k)).sort();
  main.appendChild(h('h2', null, 'Metrics ', h('small', null, '(metrics.jsonl)')));
  main.appendChild(h('label', null, 'more: ', h('select', {id: 'more-metric', onchange: (ev) => go('', {metric: ev.target.value})},
    h('option', {value: ''}, '—'), others.map((k) => h('option', {value: k}, k)))));
  main.appendChild(shown.length ? grid : h('p', null, 'No metrics recorded.'));

  const evals = RUN.metrics.filter((m) => Object.keys(m).some((k) => k.startsWith('eval/')));
  if (evals.length) {
    const cols = [...new Set(evals.flatMap((m) => Object.keys(m)).filter((k) => k.startsWith('eval/')))].sort();
    main.appendChild(h('h2', null, 'Evaluations'));
    main.appendChild(h('table', {class: 'evals'}, h('tr', null, h('th', null, 'step'), cols.map((c) => h('th', null, c))),
      evals.map((m) => h('tr', null, h('td', null, m.step), cols.map((c) => h('td', null, fmt(m[c])))))));
  }
  main.appendChild(h('h2', null, 'Steps'));
  main.appendChild(stepsTable());
};

function stepsTable() {
  const rows = [];
  for (const [s, es] of stepStats()) {
    const groups = new Set(es.map((e) => e.g)).size;
    rows.push(h('tr', {class: 'step-row', data: {step: s}},
      h('td', null, h('a', {href: link('step/' + s)}, 'step ' + s)), h('td', null, es.length), h('td', null, groups),
      h('td', null, fmt(mean(es.map((e) => e.r)))), h('td', null, fmt(mean(es.map((e) => e.ok ? 1 : 0)), 2)),
      h('td', null, fmt(mean(es.map((e) => e.n)), 1)),
      h('td', null, RUN.trees[s] ? h('a', {href: link(`tree/${s}/0`)}, RUN.trees[s] + ' trees') : '')));
  }
  return h('table', {class: 'steps'}, h('tr', null, ['step', 'trajectories', 'groups', 'mean reward', 'success',
    'mean turns', 'search'].map((c) => h('th', null, c))), rows);
}

VIEWS.steps = async function steps(main) {
  main.appendChild(h('h1', null, 'Steps'));
  main.appendChild(stepsTable());
};

// ---- the trajectory list ---------------------------------------------------------------------------------
const PAGE = 50;
const haystacks = new Map(); // "s/i" -> lower-case searchable text of a trajectory

function haystack(t) {
  // what a text search looks in (the server's load.searchable, for --serve, is the same)
  const parts = [t.task.id, t.query, t.task.instruction];
  for (const u of t.turns) parts.push(u.action, u.observation, u.state_key);
  return parts.join('\n').toLowerCase();
}

async function textMatches(entries, text) {
  // the set of "s/i" whose text holds ``text``: asked of the server (--serve), else read step by step here
  if (RUN.mode === 'serve') {
    const r = await fetch('data/search.json?q=' + encodeURIComponent(text));
    return new Set(r.ok ? (await r.json()).map(([s, i]) => key(s, i)) : []);
  }
  const steps = [...new Set(entries.map((e) => e.s))];
  for (const [n, s] of steps.entries()) { // only these steps' data are parsed
    if (n % 10 === 0) { // let the page repaint (and show how far the search is) on a large run
      status(`searching: step ${n + 1} of ${steps.length}`);
      await new Promise((done) => setTimeout(done, 0));
    }
    const trajs = await stepData(s);
    trajs.forEach((t, i) => { if (!haystacks.has(key(s, i))) haystacks.set(key(s, i), haystack(t)); });
  }
  status('');
  return new Set(entries.filter((e) => (haystacks.get(key(e.s, e.i)) || '').includes(text)).map((e) => key(e.s, e.i)));
}

async function filtered(q) {
  const num = (k) => (q.get(k) === null || q.get(k) === '' ? null : Number(q.get(k)));
  const [rmin, rmax, smin, smax] = ['rmin', 'rmax', 'smin', 'smax'].map(num);
  const success = q.get('success') || 'any';
  let out = RUN.index.filter((e) => (success === 'any' || e.ok === (success === 'yes')) &&
    (rmin === null || e.r >= rmin) && (rmax === null || e.r <= rmax) &&
    (smin === null || e.s >= smin) && (smax === null || e.s <= smax));
  const text = (q.get('q') || '').toLowerCase();
  if (!text) return out;
  const found = await textMatches(out, text);
  return out.filter((e) => found.has(key(e.s, e.i)));
}

function filterForm(q) {
  const field = (name, label, attrs) => h('label', null, label, ' ',
    h('input', {name, value: q.get(name) || '', size: 6, ...attrs}));
  const form = h('form', {class: 'filters', id: 'filters', onsubmit: (ev) => {
    ev.preventDefault();
    const p = {};
    for (const [k, v] of new FormData(form).entries()) p[k] = v;
    go('list', p);
  }},
  h('label', null, 'success ', h('select', {name: 'success'}, ['any', 'yes', 'no'].map((v) =>
    h('option', {value: v, selected: (q.get('success') || 'any') === v}, v)))),
  field('rmin', 'reward ≥', {type: 'number', step: 'any'}), field('rmax', '≤', {type: 'number', step: 'any'}),
  field('smin', 'step ≥', {type: 'number'}), field('smax', '≤', {type: 'number'}),
  field('q', 'text', {type: 'search', size: 18, placeholder: 'in replies, observations, task'}),
  h('button', {type: 'submit'}, 'Filter'));
  return form;
}

VIEWS.list = async function list(main, r) {
  const q = r.q;
  main.appendChild(h('h1', null, 'Trajectories'));
  main.appendChild(filterForm(q));
  const rows = await filtered(q);
  if (q.get('sel') === 'all') rows.forEach((e) => selected.add(key(e.s, e.i)));
  const page = Math.max(0, Number(q.get('page') || 0));
  const pages = Math.max(1, Math.ceil(rows.length / PAGE));
  const params = Object.fromEntries([...q.entries()].filter(([k]) => k !== 'page' && k !== 'sel'));
  const count = h('span', {id: 'selected-count'}, String(selected.size));
  const tick = (e) => h('input', {type: 'checkbox', checked: selected.has(key(e.s, e.i)), onchange: (ev) => {
    if (ev.target.checked) selected.add(key(e.s, e.i)); else selected.delete(key(e.s, e.i));
    count.textContent = String(selected.size);
  }});
  main.appendChild(h('p', {id: 'match-count', data: {count: rows.length}}, `${rows.length} of ${RUN.index.length} trajectories match. `,
    h('button', {onclick: () => { rows.forEach((e) => selected.add(key(e.s, e.i))); render(); }}, 'Select all matching'),
    ' ', h('button', {onclick: () => { selected.clear(); render(); }}, 'Clear selection'),
    ' Selected: ', count, ' ',
    h('button', {id: 'export', onclick: () => exportSelected(true)}, 'Export selected as chat JSONL'),
    ' ', h('button', {onclick: () => go('list', {...params, show: 'export'})}, 'Show export')));
  main.appendChild(h('table', {class: 'list'},
    h('tr', null, ['', 'step', 'group', 'task', 'reward', 'success', 'turns', 'advantage', 'judge', ''].map((c) => h('th', null, c))),
    rows.slice(page * PAGE, (page + 1) * PAGE).map((e) => h('tr', {class: 'traj-row ' + (e.ok ? 'ok' : 'fail')},
      h('td', null, tick(e)), h('td', null, e.s), h('td', null, e.g), h('td', null, e.task), h('td', null, fmt(e.r)),
      h('td', null, e.ok ? '✓' : '✗'), h('td', null, e.n), h('td', null, signed(e.a)), h('td', null, fmt(e.j)),
      h('td', null, h('a', {href: link(`traj/${e.s}/${e.i}`)}, 'open'))))));
  main.appendChild(h('p', {class: 'pager'},
    page > 0 ? h('a', {href: link('list', {...params, page: page - 1})}, '← previous') : '',
    ` page ${page + 1} of ${pages} `,
    page + 1 < pages ? h('a', {href: link('list', {...params, page: page + 1})}, 'next →') : ''));
  if (q.get('show') === 'export') {
    main.appendChild(h('h2', null, 'Export (chat JSONL)'));
    main.appendChild(h('pre', {id: 'export-text', class: 'export'}, await exportText()));
  }
};

// ---- export: one chat per line, the messages an SFT trainer reads ------------------------------------------
function chatMessages(t) {
  const msgs = [];
  if (t.system) msgs.push({role: 'system', content: t.system});
  msgs.push({role: 'user', content: t.query || t.task.instruction});
  t.turns.forEach((u, k) => {
    msgs.push({role: 'assistant', content: u.action});
    if (k + 1 < t.turns.length) msgs.push({role: 'user', content: u.observation});
  });
  return msgs;
}

async function exportText() {
  const keys = [...selected].map((k) => k.split('/').map(Number)).sort((a, b) => a[0] - b[0] || a[1] - b[1]);
  const lines = [];
  for (const [s, i] of keys) {
    const t = await getTraj(s, i);
    if (!t) continue;
    lines.push(JSON.stringify({messages: chatMessages(t), metadata: {run: RUN.name, step: s, index: i,
      task: t.task.id, group: t.group, reward: t.reward, success: t.success}}));
  }
  return lines.join('\n') + (lines.length ? '\n' : '');
}

async function exportSelected() {
  const blob = new Blob([await exportText()], {type: 'application/jsonl'});
  const a = h('a', {href: URL.createObjectURL(blob), download: `${RUN.name}-chats.jsonl`});
  document.body.appendChild(a);
  a.click();
  a.remove();
}
