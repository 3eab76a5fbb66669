# Sums the worker goroutine's time per state from 'go tool trace -d=parsed F > F.txt' of an
# 'ext4io bench --workloads atomic-1 --trace F' run (docs/performance.md, atom1).
# Usage: python3 2026-12-06-atom1-traceanalysis.py F.txt
import re,collections,sys
src=sys.argv[1]
ev=[];cur=None;stack=[]
def flush():
    global cur,stack
    if cur:
        fr=[s for s in stack if 'ext4io' in s][:3]
        m=re.search(r'StateTransition Time=(\d+) GoID=(\d+) (\w+)->(\w+) Reason="([^"]*)"',cur)
        if m: ev.append((int(m.group(1)),int(m.group(2)),m.group(3),m.group(4),m.group(5),' < '.join(f.split('/')[-1] for f in fr)))
    cur=None;stack=[]
for l in open(src):
    if l.startswith('M='):
        flush()
        if 'StateTransition' in l and 'GoID' in l: cur=l
    elif cur and l.startswith('\t') and not l.startswith('\t\t'):
        stack.append(l.strip().split(' @')[0])
flush()
c=collections.Counter(e[1] for e in ev if 'pwriteDsync' in e[5] and e[3]=='Syscall')
w=c.most_common(1)[0][0]; print('worker',w,c.most_common(3))
we=[e for e in ev if e[1]==w]
seg=collections.defaultdict(float); cnt=collections.Counter()
for a,b in zip(we,we[1:]):
    st=a[3]; lab=st
    if st in('Syscall','Waiting'): lab=st+' '+(a[5].split(' < ')[0])+' '+a[4]
    if st=='Runnable': lab='Runnable after '+(a[4] or a[2])
    seg[lab]+=(b[0]-a[0])/1000; cnt[lab]+=1
n=sum(v for k,v in cnt.items() if 'pwriteDsync' in k)
tot=(we[-1][0]-we[0][0])/1000
print('pages',n,'total us %.0f per page %.1f'%(tot,tot/n))
for k,v in sorted(seg.items(),key=lambda x:-x[1])[:14]: print('%8.1f us/page  n=%6d avg %.1f  %s'%(v/n,cnt[k],v/cnt[k],k))
