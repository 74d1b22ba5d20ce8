#!/usr/bin/env python3
"""The sweep table recomputed from `peerage-lab sweep --out FILE` rows (standard library only).

Prints the same Markdown table as `peerage-lab sweep --markdown`, over the longest run of
seeds 0..n for which every algorithm has its row, so a sweep that was stopped early (rows of
two workers arrive out of order) is summarised over the seeds it finished.

Usage: python3 scripts/sweep_table.py cases.csv
"""
import csv
import sys
from collections import defaultdict
path=sys.argv[1]
seeds=defaultdict(int)
rows=[]
with open(path) as f:
    for r in csv.DictReader(f):
        if r.get('end') is None: continue
        rows.append(r); seeds[int(r['seed'])]+=1
n=0
while seeds.get(n,0)==6: n+=1
rows=[r for r in rows if int(r['seed'])<n]
order=['bully','fast-bully','ring','chang-roberts','villadangos','echo']
kinds=[]
agg=defaultdict(lambda: dict(cases=0,inside=0,viol=0,outside=0,deg=0,settle=[]))
for r in rows:
    k=(r['algorithm'],r['kind'])
    if r['kind'] not in kinds: kinds.append(r['kind'])
    a=agg[k]; a['cases']+=1
    ok=r['ok']=='true'
    if r['inside']=='true':
        a['inside']+=1
        if not ok: a['viol']+=1
        else: a['settle'].append(int(float(r['settle_ms'] or 0)))
    else:
        a['outside']+=1
        if not ok: a['deg']+=1
print(f"seeds 0..{n}: {len(rows)} cases")
print("| algorithm | fault kind | cases | inside | violations inside | outside | degraded outside | settle ms median | settle ms max |")
print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
korder=['crash','recovery','detector-race','reorder','duplication','loss','partition','partition-heal','freeze']
korder=[k for k in korder if k in kinds]+[k for k in kinds if k not in korder]
for alg in order:
    for kd in korder:
        a=agg.get((alg,kd))
        if not a: continue
        v=sorted(a['settle'])
        med=f"{v[len(v)//2]}" if v else '-'
        mx=f"{v[-1]}" if v else '-'
        print(f"| {alg} | {kd} | {a['cases']:,} | {a['inside']:,} | {a['viol']} | {a['outside']:,} | {a['deg']:,} | {med} | {mx} |")
tot_v=sum(a['viol'] for a in agg.values()); tot_d=sum(a['deg'] for a in agg.values())
print(f"violations inside: {tot_v}; degraded outside: {tot_d}")
