// A search tree (RUN/search_trees.jsonl) as an inline SVG: one column per turn, leaves stacked in depth-first
// order so that siblings stay together; the kept path drawn bold, nodes coloured by outcome and score.

function layout(nodes) {
  const kids = new Map(), byId = new Map();
  for (const n of nodes) { byId.set(n.id, n); kids.set(n.id, []); }
  const roots = [];
  for (const n of nodes) {
    if (n.parent !== null && byId.has(n.parent) && n.parent !== n.id) kids.get(n.parent).push(n);
    else roots.push(n);
  }
  const y = new Map();
  let row = 0;
  // iterative depth-first walk (a crafted tree may be deep; recursion could overflow the stack)
  const stack = roots.slice().reverse().map((n) => [n, false]);
  while (stack.length) {
    const [n, done] = stack.pop();
    const ch = kids.get(n.id);
    if (done || !ch.length) {
      if (y.has(n.id)) continue;
      const placed = ch.filter((c) => y.has(c.id)).map((c) => y.get(c.id));
      y.set(n.id, placed.length ? (Math.min(...placed) + Math.max(...placed)) / 2 : row++);
    } else {
      stack.push([n, true]);
      for (let k = ch.length - 1; k >= 0; k--) if (!y.has(ch[k].id)) stack.push([ch[k], false]);
    }
  }
  return {y, rows: Math.max(row, 1), byId};
}

function nodeColour(n, lo, hi) {
  if (n.success) return '#1a9850';
  if (n.failed) return '#d73027';
  if (!n.valid) return '#999';
  if (n.score === null) return '#4575b4';
  const x = hi > lo ? (n.score - lo) / (hi - lo) : 0.5;
  return `hsl(215, 60%, ${Math.round(78 - 40 * x)}%)`;
}

function nodePanel(n, s, owners) {
  if (!n) return h('div', {class: 'panel'}, 'Click a node to see its action and what the world answered.');
  const owner = owners.get(n.id);
  return h('div', {class: 'panel', data: {node: n.id}},
    h('h3', null, `node ${n.id} · turn ${n.turn}`),
    h('div', {class: 'facts'}, badge('reward', fmt(n.reward)), badge('score', fmt(n.score)),
      badge('progress', fmt(n.progress)), n.kept ? badge('kept', 'yes', 'good') : null,
      n.success ? badge('success', 'yes', 'good') : null, n.failed ? badge('failed', 'yes', 'bad') : null,
      n.valid ? null : badge('valid', 'no', 'bad')),
    owner !== undefined ? h('p', null, h('a', {href: link(`traj/${s}/${owner}`)}, `trajectory #${owner} ends here`)) : null,
    h('div', {class: 'label'}, 'action'), h('pre', null, n.action || '(start)'),
    h('div', {class: 'label'}, 'observation'), obsView(n.observation, 'obs'));
}

VIEWS.tree = async function tree(main, r) {
  const s = Number(r.parts[1]), k = Number(r.parts[2]);
  const trees = await treeData(s);
  const tr = trees[k];
  main.appendChild(h('h1', null, `Search trees of step ${s}`));
  main.appendChild(h('p', {class: 'pick'}, trees.map((t, j) => h('a', {href: link(`tree/${s}/${j}`), class: j === k ? 'on' : ''},
    `${j}: ${t.task}`)), ' ', h('a', {href: link('step/' + s)}, '→ the step\'s groups')));
  if (!tr) { main.appendChild(h('p', {class: 'warn'}, 'No such tree.')); return; }
  const {y, rows, byId} = layout(tr.nodes);
  const owners = new Map(); // node id -> index of the kept trajectory that ends there
  (await stepData(s)).forEach((t, i) => { if (t.search && t.search.tree === k) owners.set(t.search.node, i); });
  const scores = tr.nodes.map((n) => n.score).filter((v) => v !== null);
  const lo = Math.min(...scores, 0), hi = Math.max(...scores, 0);
  const turns = Math.max(1, ...tr.nodes.map((n) => n.turn));
  const DX = 90, DY = 16, PAD = 24;
  const X = (n) => PAD + n.turn * DX, Y = (n) => PAD + y.get(n.id) * DY;
  const chosen = Number(r.q.get('node'));
  const edges = [], dots = [];
  for (const n of tr.nodes) {
    const p = byId.get(n.parent);
    if (p && p !== n) {
      edges.push(svg('line', {x1: X(p), y1: Y(p), x2: X(n), y2: Y(n), class: n.kept && p.kept ? 'edge kept' : 'edge'}));
    }
    dots.push(svg('circle', {cx: X(n), cy: Y(n), r: owners.has(n.id) ? 6 : 4.5, fill: nodeColour(n, lo, hi),
      class: 'node' + (n.kept ? ' kept' : '') + (n.id === chosen ? ' chosen' : ''), data: {id: n.id},
      onclick: () => go(`tree/${s}/${k}`, {node: n.id})},
    svg('title', null, `node ${n.id}, turn ${n.turn}: ${(n.action || '(start)').trim().slice(0, 60)} · score ${fmt(n.score)}`)));
  }
  const W = PAD * 2 + turns * DX, H = PAD * 2 + (rows - 1) * DY;
  const axis = [];
  for (let t = 0; t <= turns; t++) axis.push(svg('text', {x: PAD + t * DX, y: 12, class: 'tick', 'text-anchor': 'middle'}, 'turn ' + t));
  main.appendChild(h('p', {class: 'small'}, `${tr.strategy}, scorer ${tr.scorer}: ${tr.nodes.length} nodes. `,
    'Green: success, red: failed, grey: invalid reply, blue: darker is a higher score; bold: the kept path; ',
    'large: a kept trajectory ends there.'));
  main.appendChild(h('div', {class: 'treebox'},
    h('div', {class: 'treesvg'}, svg('svg', {class: 'tree', width: W, height: H, viewBox: `0 0 ${W} ${H}`,
      data: {nodes: tr.nodes.length}}, axis, edges, dots)),
    nodePanel(byId.get(chosen), s, owners)));
};
