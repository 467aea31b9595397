"""Source lines of one kernel by warp-stall samples, from an ncu source page exported as CSV.

    ncu --import REPORT.ncu-rep --page source --csv --print-source cuda,sass > K.csv
    python3 hotspots.py K.csv [N]

prints the total samples, then the N lines with the most samples (file:line, source text, the
three largest stall reasons). The report was taken with --warp-sampling-interval 0 on a -lineinfo
build (runC.sh). An inlined line's samples appear again at each call site above it
(when_grid_done's fence, signal_when_grid_done's call, the kernel's call): do not add those up."""
import csv,sys,collections
f=sys.argv[1]
rows=list(csv.reader(open(f)))
# file contains blocks per source file: "File Path", ..., header "Line No", then rows of source lines (Line No non-empty) and sass rows?
cur=None; hdr=None; out=[]
for r in rows:
    if not r: continue
    if r[0]=='File Path': cur=r[1].split('/')[-1]; continue
    if r[0]=='Function Name': continue
    if r[0]=='Line No': hdr=r; continue
    if hdr is None: continue
    out.append((cur,r))
si=hdr.index('Warp Stall Sampling (All Samples)')
# lines: Line No non-empty and Address empty?
lines=[]
for cur,r in out:
    if r[0] and r[0].isdigit():
        try: s=int(r[si])
        except: s=0
        lines.append((s,cur,int(r[0]),r[1].strip()[:100], r))
tot=sum(s for s,_,_,_,_ in lines)
print('total samples',tot)
stalls=[h for h in hdr if h.startswith('stall_') and 'Not Issued' not in h]
for s,cur,ln,src,r in sorted(lines,key=lambda x:-x[0])[:int(sys.argv[2]) if len(sys.argv)>2 else 25]:
    top=sorted([(float(r[hdr.index(k)] or 0),k[6:]) for k in stalls],reverse=True)[:3]
    print(f"{s:6d} {100*s/tot:5.1f}% {cur}:{ln} {src} | "+" ".join(f"{k}={int(v)}" for v,k in top if v>0))
