// The run summary (facts, metric curves, evaluations, steps) and the trajectory list (filters, text search,
// selection, chat JSONL export).

const CHARTS = ['reward/mean', 'success/rate', 'valid/rate', 'turns/mean', 'eval/success', 'eval/reward',
  'entropy', 'loss/policy', 'approx_kl', 'clip_frac', 'grad_norm', 'loss/value', 'tokens_per_s', 'mem/peak_rss_gb'];
const RATES = new Set(['reward/success', 'success/rate', 'valid/rate', 'eval/success', 'eval/valid']);
const ALWAYS = new Set(['reward/mean', 'success/rate', 'valid/rate', 'eval/success']); // drawn even when flat

function niceStep(span, n, integer) {
  // about n intervals of 1, 2 or 5 x 10^k over span (at least 1 for integer axes such as steps)
  const raw = span / Math.max(1, n);
  const mag = 10 ** Math.floor(Math.log10(raw || 1));
  const step = [1, 2, 5, 10].map((m) => m * mag).find((x) => x >= raw * (1 - 1e-9));
  return integer ? Math.max(1, Math.round(step)) : step;
}

function ticks(lo, hi, step) {
  const out = [];
  for (let k = Math.ceil(lo / step - 1e-9); k * step <= hi + step * 1e-9; k++) out.push(k * step);
  return out;
}

function tickLabel(v, step) {
  if (Math.abs(v) < step * 1e-6) return '0';
  if (Math.abs(v) >= 1e4 || step < 1e-3) return v.toExponential(1);
  return v.toFixed(Math.max(0, -Math.floor(Math.log10(step) + 1e-9)));
}

function chart(name, points, span, opts) {
  // one metric against the step as an inline SVG: round ticks on both axes with grid lines, the points joined
  // (an evaluation's too: a few points are dots on a line); every chart spans the run's steps, so that charts
  // stacked in the grid line up. points: [x, y, label?] (a label marks a special point, e.g. after the warm start)
  const o = opts || {};
  const W = 300, H = 165, L = 50, R = 12, T = 22, B = 30;
  const ys = points.map((p) => p[1]);
  let [x0, x1] = span;
  let [y0, y1] = RATES.has(name) ? [0, 1] : [Math.min(...ys), Math.max(...ys)];
  if (RATES.has(name)) { y0 = Math.min(0, ...ys); y1 = Math.max(1, ...ys); }
  if (x0 === x1) { x0 -= 1; x1 += 1; }
  if (y0 === y1) { const d = Math.abs(y0) * 0.1 || 0.5; y0 -= d; y1 += d; }
  const ystep = niceStep(y1 - y0, 4, false);
  [y0, y1] = [Math.floor(y0 / ystep + 1e-9) * ystep, Math.ceil(y1 / ystep - 1e-9) * ystep];
  const xstep = niceStep(x1 - x0, 5, true);
  const X = (x) => L + (W - L - R) * (x - x0) / (x1 - x0);
  const Y = (y) => H - B - (H - T - B) * (y - y0) / (y1 - y0);
  const evaluation = name.startsWith('eval/'), sparse = evaluation || points.length <= 12; // sparse: dots drawn
  const el = svg('svg', {class: 'chart', viewBox: `0 0 ${W} ${H}`, width: W, height: H, data: {metric: name}},
    svg('text', {x: L, y: 14, class: 'ctitle'}, o.title || name));
  for (const v of ticks(y0, y1, ystep)) {
    el.appendChild(svg('line', {x1: L, y1: Y(v), x2: W - R, y2: Y(v), class: 'gridline'}));
    el.appendChild(svg('text', {x: L - 5, y: Y(v) + 3.5, class: 'tick ytick', 'text-anchor': 'end'}, tickLabel(v, ystep)));
  }
  for (const v of ticks(x0, x1, xstep)) {
    el.appendChild(svg('line', {x1: X(v), y1: H - B, x2: X(v), y2: H - B + 4, class: 'axis'}));
    el.appendChild(svg('text', {x: X(v), y: H - B + 14, class: 'tick xtick', 'text-anchor': 'middle'}, String(v)));
  }
  el.appendChild(svg('line', {x1: L, y1: H - B, x2: W - R, y2: H - B, class: 'axis'}));
  el.appendChild(svg('line', {x1: L, y1: T, x2: L, y2: H - B, class: 'axis'}));
  el.appendChild(svg('text', {x: W - R, y: H - 3, class: 'tick', 'text-anchor': 'end'}, o.xlabel || 'step'));
  if (points.length > 1) {
    el.appendChild(svg('polyline', {class: 'line' + (evaluation ? ' eval' : ''),
      points: points.map((p) => `${X(p[0])},${Y(p[1])}`).join(' ')}));
  }
  for (const [x, y, label] of points) {
    if (!sparse && !label) continue;
    el.appendChild(svg('circle', {cx: X(x), cy: Y(y), r: label ? 4 : evaluation ? 3.5 : 2.5, class: 'dot' + (evaluation ? ' eval' : '') +
      (label ? ' marked' : '')}, svg('title', null, `${label || (o.xlabel || 'step') + ' ' + x}: ${fmt(y, 4)}`)));
  }
  return el;
}

function series(name) {
  const out = [];
  for (const m of RUN.metrics) {
    if (typeof m[name] === 'number') out.push([m.step, m[name]]);
    // the held-out success after the warm start, at step 0 after the untrained policy's: one line through both
    if (name === 'eval/success' && typeof m['warm/success'] === 'number') out.push([m.step, m['warm/success'],
      'after warm start']);
  }
  return out;
}

function isFlat(points) {
  // nothing to see: every value the same, up to noise (approx_kl around 1e-7, clip_frac at 0)
  if (points.length < 2) return false;
  const ys = points.map((p) => p[1]);
  const lo = Math.min(...ys), hi = Math.max(...ys);
  return hi - lo <= 1e-6 * Math.max(1, Math.abs(hi), Math.abs(lo));
}

function phaseTimes() {
  // [phase, seconds] from metrics.jsonl: step 0's evaluation and warm start, then the steps' parts summed
  const m0 = RUN.metrics.find((m) => m.step === 0) || {};
  const later = RUN.metrics.filter((m) => m.step > 0);
  const total = (k) => (later.some((m) => typeof m[k] === 'number') ?
    later.reduce((a, m) => a + (typeof m[k] === 'number' ? m[k] : 0), 0) : undefined);
  const warm = RUN.warm.length ? RUN.warm.reduce((a, w) => a + (w.seconds || 0), 0) : undefined;
  return [['evaluation at the start', m0['time/eval']], ['warm start', m0['time/warm_start'] ?? warm],
    ['evaluation after the warm start', m0['time/eval_warm_start']],
    [`rollouts (${later.length} steps)`, total('time/rollout')], [`updates (${later.length} steps)`, total('time/update')],
    ['later evaluations', total('time/eval')]].filter(([, v]) => typeof v === 'number');
}

function duration(sec) {
  return sec < 60 ? `${sec.toFixed(1)} s` : `${Math.floor(sec / 60)} min ${String(Math.round(sec % 60)).padStart(2, '0')} s`;
}

function phaseTable() {
  const rows = phaseTimes();
  if (!rows.length) return null;
  const all = rows.reduce((a, [, v]) => a + v, 0);
  return h('table', {class: 'phases'}, h('tr', null, h('th', null, 'phase'), h('th', null, 'time'), h('th', null, 'share')),
    rows.map(([name, v]) => h('tr', {class: 'phase-row'}, h('td', null, name), h('td', null, duration(v)),
      h('td', null, h('span', {class: 'bar', style: {width: `${Math.round(120 * v / all)}px`}}),
        ` ${Math.round(100 * v / all)} %`))),
    h('tr', null, h('td', null, h('b', null, 'total')), h('td', null, h('b', null, duration(all))), h('td', null, '')));
}

function evalEpisodesTable() {
  // one row per logged evaluation (eval_trajectories.jsonl), linking to its episodes
  const known = (ev) => ev.tasks.filter((t) => t[2] !== null);
  const anySeen = RUN.evals.some((ev) => known(ev).length);
  const part = (ev, seen) => {
    const ts = ev.tasks.filter((t) => t[2] === seen);
    return `${ts.filter((t) => t[1]).length}/${ts.length}`;
  };
  return h('table', {class: 'eval-runs'},
    h('tr', null, ['evaluation', 'step', 'solved', anySeen ? 'seen in training' : null, anySeen ? 'unseen' : null, '']
      .filter((c) => c !== null).map((c) => h('th', null, c))),
    RUN.evals.map((ev) => h('tr', {class: 'eval-row', data: {k: ev.k}}, h('td', null, ev.label), h('td', null, ev.step),
      h('td', null, `${ev.ok}/${ev.n}`), anySeen ? h('td', null, part(ev, true)) : null,
      anySeen ? h('td', null, part(ev, false)) : null,
      h('td', null, h('a', {href: link('eval/' + ev.k)}, 'episodes')))));
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
  const extra = r.q.get('metric');
  const present = CHARTS.filter((k) => keys.has(k) && series(k).length);
  const flat = present.filter((k) => !ALWAYS.has(k) && k !== extra && isFlat(series(k)));
  const shown = present.filter((k) => !flat.includes(k));
  if (extra && keys.has(extra) && !shown.includes(extra)) shown.push(extra);
  const all = RUN.metrics.map((m) => m.step);
  const span = [Math.min(...all), Math.max(...all)];
  const grid = h('div', {class: 'charts'}, shown.map((k) => chart(k, series(k), span)));
  if (RUN.warm.length > 1) {
    grid.appendChild(chart('warm/loss_bc', RUN.warm.map((w) => [w.k, w.loss]), [1, RUN.warm.length],
      {title: 'warm start: loss_bc', xlabel: 'warm-start step'}));
  }
  const others = [...keys].filter((k) => !shown.includes(k)).sort();
  main.appendChild(h('h2', null, 'Metrics ', h('small', null, '(metrics.jsonl)')));
  main.appendChild(h('label', null, 'more: ', h('select', {id: 'more-metric', onchange: (ev) => go('', {metric: ev.target.value})},
    h('option', {value: ''}, '—'), others.map((k) => h('option', {value: k}, k)))));
  if (flat.length) {
    main.appendChild(h('span', {class: 'small', id: 'flat'}, ' Not drawn, flat: ', flat.map((k) =>
      `${k} = ${fmt(series(k)[0][1])}`).join(', ')));
  }
  main.appendChild(shown.length ? grid : h('p', null, 'No metrics recorded.'));
  const phases = phaseTable();
  if (phases) {
    main.appendChild(h('h2', null, 'Time per phase'));
    main.appendChild(phases);
  }

  const evals = RUN.metrics.filter((m) => Object.keys(m).some((k) => k.startsWith('eval/')));
  if (evals.length || RUN.evals.length) main.appendChild(h('h2', null, 'Evaluations'));
  if (RUN.evals.length) main.appendChild(evalEpisodesTable());
  if (evals.length) {
    const cols = [...new Set(evals.flatMap((m) => Object.keys(m)).filter((k) => k.startsWith('eval/')))].sort();
    main.appendChild(h('table', {class: 'evals'}, h('tr', null, h('th', null, 'step'), cols.map((c) => h('th', null, c))),
      evals.map((m) => h('tr', null, h('td', null, m.step), cols.map((c) => h('td', null, fmt(m[c])))))));
  }
  main.appendChild(h('h2', null, 'Steps'));
  main.appendChild(stepsTable());
};

function stepStats() {
  const by = new Map();
  for (const e of RUN.index) {
    if (!by.has(e.s)) by.set(e.s, []);
    by.get(e.s).push(e);
  }
  return by;
}

function stepsTable() {
  const rows = [];
  const searched = Object.keys(RUN.trees).length > 0; // a column only for runs with search trees
  for (const [s, es] of stepStats()) {
    const groups = new Set(es.map((e) => e.g)).size;
    rows.push(h('tr', {class: 'step-row', data: {step: s}},
      h('td', null, h('a', {href: link('step/' + s)}, 'step ' + s)), h('td', null, es.length), h('td', null, groups),
      h('td', null, fmt(mean(es.map((e) => e.r)))), h('td', null, fmt(mean(es.map((e) => e.ok ? 1 : 0)), 2)),
      h('td', null, fmt(mean(es.map((e) => e.n)), 1)),
      searched ? h('td', null, RUN.trees[s] ? h('a', {href: link(`tree/${s}/0`)}, RUN.trees[s] + ' trees') : '') : null));
  }
  return h('table', {class: 'steps'}, h('tr', null, ['step', 'trajectories', 'groups', 'mean reward', 'success',
    'mean turns', searched ? 'search' : null].filter((c) => c).map((c) => h('th', null, c))), rows);
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
  // columns no trajectory of the run fills are left out (the judge's when no judge ran)
  const adv = RUN.index.some((e) => e.a !== null), judged = RUN.index.some((e) => e.j !== null);
  main.appendChild(h('table', {class: 'list'},
    h('tr', null, ['', 'step', 'group', 'task', 'reward', 'success', 'turns', adv ? 'advantage' : null,
      judged ? 'judge' : null, ''].filter((c) => c !== null).map((c) => h('th', null, c))),
    rows.slice(page * PAGE, (page + 1) * PAGE).map((e) => h('tr', {class: 'traj-row ' + (e.ok ? 'ok' : 'fail')},
      h('td', null, tick(e)), h('td', null, e.s), h('td', null, e.g), h('td', null, e.task), h('td', null, fmt(e.r)),
      h('td', {class: 'outcome'}, e.ok ? '✓' : '✗'), h('td', null, e.n), adv ? h('td', null, signed(e.a)) : null,
      judged ? h('td', null, fmt(e.j)) : null,
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
