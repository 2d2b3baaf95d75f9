"""The fitted weights and floors of the four tokenizer families (data only).

``python -m benchmarks.fit_estimator --write`` rewrites what stands between the FITTED
markers. A family's floor (`FAMILY_FLOOR`) is the lowest summed ratio of estimate ÷ exact
count of any text class seen out-of-sample on the wide evaluation set
(``benchmarks/textgen.py``), minus a margin.
"""

from __future__ import annotations

from harness.tokens._weights import Coefficients

# Fitted by benchmarks/fit_estimator.py (python -m benchmarks.fit_estimator --write).
# BEGIN FITTED
FAMILY_COEFFICIENTS: dict[str, Coefficients] = {
    "o200k": Coefficients(
        table=(
            "1010101010101010100108101008101010101010101010101010101010101010"
            "06010d0a1f010114010f0807180e1f151f1518180e18180c010a010110010901"
            "01010101011a1f1f01011f0101010301101f16011f161f1f1f1f101f11011407"
            "0e04140d19021e0e0b01100105040101011f01060501011105151f1f1f010e10"
            "0101010101010101010101010101010101010101010101010101010101010101"
            "0101010101010101010101010101010101010101010101010101010101010101"
            "0101010101010101010101010101010101010101010101010101010101010101"
            "0101010101010101010101010101010101010101010101010101010101010101"
        ),
        pages=(
            "0014140a05080504040808080808081f1f1f1f1f1f1f1f1f1f1f1f1f1f1f1f0a"
            "00080808080808080808080808080808090909090a0a0a0a0a0a0a0a0a0a0a0a"
            "0a0a0a0a0a0a0a0a0a0a0a0a0a0a060606060606060606060606060606060606"
            "0606060606060606060606060606060606060606060606060606060606060606"
            "0606060606060606060606060606060606060606060606060606060606060606"
            "1f1f1f1f1f1f1f1f1f1f1f1f1313131313131313131313131313131313131313"
            "1313131313131313131313131313131313131313131313130a0a0a0a0a0a0a0a"
            "1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b1b0d0d0000000010"
        ),
        unit=0.034894,
        page_unit=0.104683,
        rare_cjk=1.4083,
        fixed=0.0000,
        cjk_single=(
            "c-n<kO^BOC7=C6liIbShB%8L`RdJHWHnv)K*D4h+lQh;;S51G!f<1&%VGqUDi<Tl"
            "fNz*m8g0WOk^pI{vt0*d7^dO{5i$zdMiz0aN55bEE!JZWHedkNIYbiP*AM?#O^UU"
            ");^StjI-M913{Wm|dul(4{CpY0*SNra+nF|M1XVu;Vv5mPiW%*|N?X5nOaX;KLk("
            "Amyjq*`%{SC@n>7+tA(avh@@E$pf^WFjynJ&<$9`y}B75u?<D^>rVKkshdsV0PZU"
            "ssO7ZtsiRPOG`wr&6bvbxIPwxe`2ZE_TgzZI9A?4j{aNB!ugZp8YHSynbEmN!i0r"
            "pqqZ~f;jNTmm>f4$#a9(%mX40p+tEj@(zg8#sy$^NzqaPhHxFANv}p>3T^<<G~Nt"
            "VXd307;i*eneVM&+k4x5CS|n?SJBMzq(t53<kJ^Pb3En|snx5GTBWZN2jMEMXarE"
            "Y!$2$*Y6aMH0SbV#xBkEP!JLUBCIhyBR0LB@C=qMKmF`~8!6M&<CXdfNgDIwl{-C"
            "w$?zVoMsN%vjSegDmG+e!xV(wY~ovtH74uVqn(NF*vzoL6tnpDHW#`b@>TU$+!2_"
            "`G&~y0i01Z&3DOUyXsfvD0q}%qM_bQIoNWJH`(?x%pK)YyDVDTN`tG?7X6>Iu6x#"
            "yv}clD_A9sXld5C8<gGxbe0ILhH(jhpK$8yBVu;F=uT`}5bD&{4Z1klEbe;Ej_LD"
            "rQev%VQLI<aLysx_7U82E*U}nBZeSAXJRdaaqmgi?N&OP*8JdN6U)Y!1a>h&v4=+"
            "t$Oc%Qzzue(et&#VI6KE)%Rye&?b+7<bf@>#%<rkCd{3(1U)q@MMUhzb1kVR_)BO"
            "5<%EGD$?wjq@to5@I&N$eu+=SVT3l?vKhWkw;x+DW!xWS}61CFx`;9Qn|VS2p_g5"
            ">yS8WY5YsG|~}h@rMnX{RV%G1U6z$dOrq~Qn6Y)q4W#cgw?A>(o)LSty1;fb#2_{"
            "9uU(hcc>Jkm%6R35IS~@xj5!C5bT-2N2;taUU>r*JZ~~+MwH}`{FP0gDmZYGIILu"
            "E4{S6}hBp+o><w!{gkU+|p*?>t_zY5Wa_EYlqiHP&gA7f`V`d~FM2|9u&z|inEL="
            "Tc<`<!&^bG7wJsNr?Ek0OAR*^Pcp%Kc=u4?p0Q%5pKTRd}qh~(m*AIUpYkrVKQX6"
            "Ua|qsc=$wy1rA>=%^|BE;P$hahrtkw$1c2(f9YCP^R4&TOolXgN=Io#p*f-UY219"
            "cjI_Q6LKi?+7N#>d};K%(qIiQXmp7xhP&#BBDhavIFDzOE@e&WliF6SI8ViP{n2*"
            ";^ZU}N(nIx#YL<~v7J5s-pOxIto_)pHgsfl$}7VOr?8op)`*UTm4?d~^6N}1Qaxw"
            "xMW+Lub(n6G;To<%Rjr^XJBT4orQnfV7^-Jk8ePgOUpPKMPRL*e|6+|39lcZm{We"
            "7)hlfPolyRi!l0j8F=s89)6a$Q*tjf?D>BIS`ActC1WKo}CE#=K!E>t9ImKwmVBJ"
            "!NRQS(uDVKHAZG={x;F%_n(*NW(3phAGv-cFk+=%u;rt6itO()Q7q0(&=pFW0J6j"
            ">|?36u~ql;D)&Oda-bqhd~I(IYG&|;^+9;?Q7;sd-}&7OeM8Zq7BD^li18QHs;4$"
            "OjZT%{lDM&FqVC_F|%C%4x8rFqMwm{w93&Pn7B+)j*_SpVz-(HI-$10T{Pucd4Ih"
            "wu6b&{GWI9Zt>VLT%jc3vjCb~af?IamR)!|lYlOhoE!fLyvFA9I*baOx{2~7(jTt"
            "_#tSe#Ms}aZ&!LQQO;mwzvWG@(&bd?se>Oz=&S$L7s6jvgGemtj({7F62-9IIeOZ"
            "-@JXEIz&+><C))A50B*>E+}9<^#*VoBAY4i(oYgy7WAW71IJY<|_i!c<`7a4zuXr"
            "6Yz-K~5%NGD{;F0W!l)b(pp?oS32HT$Z8ajl%yoGqkw4LaqO5K1DZVRE-5!Cr<(A"
            "^Da?|EFWsUW=JMLm)^e)?jIq0H&X"
        ),
        dense=(
            "1f1f1f1f1f1f1f1f1f091f1f1f091f1f1f1f1f1f1f1f1f1f1f1f1f1f1f1f1f1f"
            "1c0118121a011f1b01011b011f111f010f0c0f0310100d0a050b011f0a1f1f1f"
            "011f111a010101011501011c19190101021901151f1f1f011f1f0f1f1f0a1f01"
            "04010f0a09080b0d0101010301010101010101010101011d0a010104051c1f1f"
            "0909090909090909090909090909090909090909090909090909090909090909"
            "0909090909090909090909090909090909090909090909090909090909090909"
            "0909090909090909090909090909090909090909090909090909090909090909"
            "0909090909090909090909090909090909090909090909090909090909090909"
        ),
        dense_unit=0.034894,
        dense_gate=0.3894,
        dense_case=1.0228,
        dense_digit=1.1773,
        dense_symbol=0.5418,
        runs=(
            (" ", 1.00, 2.00),
            ("\t", 2.00, 16.00),
            ("\n", 2.00, 16.00),
            ("\r", 16.00, 128.00),
            ("=", 1.00, 4.00),
            ("-", 1.00, 4.00),
            ("_", 1.00, 4.00),
            ("*", 1.00, 4.00),
            ("#", 1.00, 4.00),
            (".", 1.00, 4.00),
            ("~", 1.00, 8.00),
            ("0", 11.00, 85.34),
            ("/", 1.00, 4.00),
            ("+", 1.00, 8.00),
            ("|", 8.00, 64.00),
            (":", 2.00, 16.00),
            ("<", 4.00, 32.00),
            (">", 4.00, 32.00),
            ("\\", 8.00, 64.00),
            ("`", 16.00, 128.00),
            ("'", 8.00, 64.00),
            ('"', 8.00, 64.00),
            ("─", 2.00, 16.00),
            ("━", 4.00, 32.00),
            ("═", 4.00, 32.00),
        ),
    ),
    "cl100k": Coefficients(
        table=(
            "1010101010101010100108101008101010101010101010101010101010101010"
            "06010d0b1f010119010e0807180d1f131f1619170d17160c020b01011f010901"
            "01010101011d1b1f01011f0101010701111f0c011d1f1f1f1f1f101f14011807"
            "0c041b0817021f0f1601160104010101031f01040401010905171f1f1f030d10"
            "0101010101010101010101010101010101010101010101010101010101010101"
            "0101010101010101010101010101010101010101010101010101010101010101"
            "0101010101010101010101010101010101010101010101010101010101010101"
            "0101010101010101010101010101010101010101010101010101010101010101"
        ),
        pages=(
            "0017171007100707070f0f0f0f0f0d1f1f1f1f1f1f1f1f1f1f1f1f1f1f1f1f10"
            "000808080808080808080808080808080c0c0c0c000000000000000000000000"
            "0000000000000000000000000000070707070707070707070707070707070707"
            "0707070707070707070707070707070707070707070707070707070707070707"
            "0707070707070707070707070707070707070707070707070707070707070707"
            "1f1f1f1f1f1f1f1f1f1f1f1f1717171717171717171717171717171717171717"
            "1717171717171717171717171717171717171717171717170b0b0b0b0b0b0b0b"
            "1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d1d00000000000012"
        ),
        unit=0.034950,
        page_unit=0.104851,
        rare_cjk=1.3774,
        fixed=0.0000,
        cjk_single=(
            "c-pmAy>1gh5S|&Yqb0alTS1DbCO~mQ6nOxOO>lt(6;(<jQBWcA1{35WbQV?0h-cs"
            "dEJ~h)$6#k~?`O|G?gGhJ_U-TN_kA<7=gUv_$UQSNcnIPFz+X7KIfga7^;o!VK>$"
            "<KaV{3&DPX~dF*PRLz_IPpw=v0jV8dpf|AN&iP-}SRL7u?jS>;FVYJyNZX4vY((A"
            "kZ80bhE)GB3{2uD>FDCh*s~0x*2ILP40H?>l(*TE6FX=&m9YL{m@M%3=I9WoOZz^"
            "KFM4_C{z?ZD!N;GukdOI(`hx1Mrj%S$I+36shZz#yj+@0DqP-zYvh?HUTpgPLoAg"
            "O>pWYGAvSn!+9(f8)<apCJzRbe^p9sqYJM*I5}4P(jsJhDLLbAurlLLU;NK<`CP$"
            "Ja6sBPQ6k<(gl139YD(kNF!~5gKo=4fB#gNBG36GScj4eIB1^;bk@?FyX*eQD3Pq"
            "fzgi=XoW3vH~YF2iD@eW*se>S_H616j`#{|cvuhffEkq)B@$@SgFd%+AdaGB~3>9"
            "{|Cxl6R4=CUg-@qrFl_?T6WX=zC)Nj+B|6zW6%B9pcIA~L;Y7`K{TV!!32QWkbNK"
            "6g#6jHtxiOc$={goxnYOzzm9%j4TaTqsd~7no`jG0TcEs)b7*mkVJ2aI?t*-lx`Y"
            "26BlskI|s#-Q+jA{V=^wCvTMSgkb%kyUEvA3HJ)}gYGY~O^$|o$*v#K5~*|Sy-O<"
            "S{|bbomXlR=b+lNSL7_P4OeX`c-Qhg??~C{@Y+QW)00lxxI{"
        ),
        dense=(
            "181818181818181818091f181809181818181818181818181818181818181818"
            "19161c1a1f131f1e010101011f121f01100c0e0510120e0a0409011f180e1f1f"
            "01010d1a010101010f01011f08100101061e12131f1f1f011f1f0f151f170f01"
            "010d0e08040c050c1201010401010101010101010101011f11010101071f1f18"
            "0909090909090909090909090909090909090909090909090909090909090909"
            "0909090909090909090909090909090909090909090909090909090909090909"
            "0909090909090909090909090909090909090909090909090909090909090909"
            "0909090909090909090909090909090909090909090909090909090909090909"
        ),
        dense_unit=0.034950,
        dense_gate=0.3900,
        dense_case=1.1601,
        dense_digit=1.1350,
        dense_symbol=0.3388,
        runs=(
            (" ", 1.00, 2.00),
            ("\t", 2.00, 16.00),
            ("\n", 1.00, 8.00),
            ("\r", 32.00, 256.00),
            ("=", 1.00, 4.00),
            ("-", 1.00, 4.00),
            ("_", 1.00, 4.00),
            ("*", 1.00, 4.00),
            ("#", 1.00, 4.00),
            (".", 1.00, 4.00),
            ("~", 1.00, 8.00),
            ("0", 11.00, 85.34),
            ("/", 1.00, 4.00),
            ("+", 1.00, 8.00),
            ("|", 8.00, 64.00),
            (":", 4.00, 32.00),
            ("<", 4.00, 32.00),
            (">", 4.00, 32.00),
            ("\\", 8.00, 64.00),
            ("`", 16.00, 128.00),
            ("'", 16.00, 128.00),
            ('"', 16.00, 128.00),
            ("─", 4.00, 32.00),
            ("━", 16.00, 128.00),
            ("═", 16.00, 128.00),
        ),
    ),
    "deepseek": Coefficients(
        table=(
            "101010101010101010010c10101f101010101010101010101010101010101010"
            "05010b0a1f010116011b060519101f181f1618160e18160b020a030110020a01"
            "0101010a011f1a1401011f01010111010c1f1c01171f1f1f1f1f101f1901140e"
            "0b041b0e16011f1017011f0109050101061f01030301010d05131f1f1f0d0f10"
            "0101010101010101010101010101010101010101010101010101010101010101"
            "0101010101010101010101010101010101010101010101010101010101010101"
            "0101010101010101010101010101010101010101010101010101010101010101"
            "0101010101010101010101010101010101010101010101010101010101010101"
        ),
        pages=(
            "0013130a060a0505050a0a0a0a0a081f1f1f1f1f1f1f1f1f1f1f1f1f1f1f1f0a"
            "0008080808080808080808080808080809090909070707070707070707070707"
            "0707070707070707070707070707050505050505050505050505050505050505"
            "0505050505050505050505050505050505050505050505050505050505050505"
            "0505050505050505050505050505050505050505050505050505050505050505"
            "1f1f1f1f1f1f1f1f1f1f1f1f1515151515151515151515151515151515151515"
            "1515151515151515151515151515151515151515151515150a0a0a0a0a0a0a0a"
            "1e1e1e1e1e1e1e1e1e1e1e1e1e1e1e1e1e1e1e1e1e1e1e1e1e00000000000011"
        ),
        unit=0.034674,
        page_unit=0.104023,
        rare_cjk=1.5138,
        fixed=0.0000,
        cjk_single=(
            "c-nPUe{@sT9sk~&oAf3P;U*0=v;}TnQ%FmN^ano_w{w%G7-*SEDGr4lQ&y2p2Oeb"
            "`j-$ItlM)JOir|4dSz19V<BY=QgyVM313^)6cECZWGRqIO+oXU@@X#IDeZYSFvzz"
            "zMdwK8Pcfa4y=kxu1*DPCk<I0`$midQIovnj>5&n4UdskNaQkTEHW}4o7s287W`y"
            "!T#O^KYIvBm20XXlqo|B?M%mZaKFo6h2Tv7>NR(<Erl9OG^d7js^YvE8{d!gHKR;"
            "5H|a1SUidPrSpub>;Ak)6=#VP0613$KJsHxw(d2M@akRs{8hje73fU_O<(DrW6n6"
            "j~siT!{$5d2L4_P8qo3&!XMYXeSO{snKxctUc}R_EhJ<A`LQ)m-*~^~!K=Fl-yFV"
            "s!5nk<=w?)LSM0+dTlAM~-s9hImuDU!wR*AuI{Qsxeu~PknuD>I9Bhhg9`tju(EZ"
            ">>$y?^ib&$J117Z^+cSM=gDNx8VAgpl=AJ-ZwZ%kxLt>N^!wlC+VC6rJ?8zTTT!X"
            "yG|X$1~0QUl;#9|Rj0e#jgH6F?Fw1p9D~mhFkZux)7lz1bsQk!|7mrJs~FE(+Aq*"
            "~0!}t=|cmYd|-9@%<n$CkM$z2|(-sc5ZP+VKxQ;mpY+Sox5LOX!Dlscrkb5p~k1q"
            "{)3GeI8)s6>B$RCWm&fV>LV94QIo|<3p{VfnhmK1cu`r9O3_b2Q$aF>!1&&+K{#j"
            "e&l|QxmO5L$H8A*2m5*_7(1kZXOzk_V`v(wMBB>E@I5lqFj@74=J%u7xsV$${)>S"
            "j+xjH;^uePM`?SeL{^-d7W123n+6Y-bflGkUs16njSYh$xBZr3)xIox2uZG7z}00"
            "|FhXl?K`kVpY!3&Mir5fCuYiN3yfod}<Lr|r?P*37krV@}J^_oj^2_MBUJ>X$>8y"
            "Dqll(648#17GV7ul{WCpnb&i_4(WL(gb?y?Y36NC*)>DAt1;};zkmKDFYKk;Adv%"
            "_Q%{L$XFPGyDA{X5#D*`(MI+flAbkPeR~qs+9nB~)x1j%otU2N?$)A?u79SY`(xn"
            "^=m4Z<F~tW|3pVDsbz)zy_(QdC&VjoA((Y2-g}ZC*I}al!$GN@PqRj5q?*g{SC+~"
            "9>!%~xw8f5sv?s9Ne_|jIP5gsQDIFf{T!ieXpn<2m;$SC!r)ryB4Av9^TXqZuG!x"
            "RGoRWVHI>lROx5rF4_g!Lu_*V}(leAponhQ19G27hnE88t(8W!CO@qE)ziuz<{4J"
            "gHz#$LEc7*j3m|C#TDw!Za1(Wc-RVM;(QcnOWqU>+k)j&Brczu-Ua>$5{SwXJzpo"
            "cRlq9tJFa+$H6||+9=7<>TtD*=`)kl!R&DCmz<4u$B~-_fw_QUEBK^KC<-N3dR14"
            "3f%djsf|<)*@C}{jNWhx@eF_ds+!B&?44R;+KSVf7u_SV8m<D~4-&}|&)PBB9cS6"
            "T1>>F=V`9fCUQIH6ko-jE<#HaJ`MD>7B&ymlXwF%1KHQUWwu|OJ#B^c3G@{~f1|A"
            "mpDSWS^Gks*IzjY0?YVq<0Tt`R)TTt0gYiB$3x*WvL`Zq2KmWd~<c?cNr1fFMjLQ"
            "sC(mkqB1gr^1Im*xaSNW4IV})TYlf0rt%HzyT#SnVV`=$V*S<4<ouI5G5Qs>%HLP"
            "Fkfx=crqbzezRux5>T{b0qS7Qd8Xi?w_BQPasYZ5mNrya68%Y3?p*@JDmwNC<Er#"
            "+{q05kt=;jEsuwB_l;=b{r7m0032xExT|a`J5aNA+{TTkFY8i{9ny9>nK({TR-~s"
            "9f{7NDawmktPzCIx#QdQaMNFPSn&Abp2i<Je?LgcqdNGau+*iD(y2##Z50vuLGvQ"
            "ap-VQBj|pG~^4b7<eCmbw*X&PSLT;ALW&xeaU0>|j?L>Cu|q2@^JXCI-4q0wS-5O"
            "QQ9VO6LZP#GTXLDm>Q^70r8k8_HT&HJBk|tAm9zARftoAEn_QWTL)$Ol5DGr(|H7"
            "yC2-8Sml9)J~B)mBh~SX9i=k2<#1dk;oBj}<mSbuARd+K%19QUNrOP!$0yy&(UjY"
            "HmIJ@&#8m=IYAe!!P{T1vr^`mUh#J{-5F5+gLoF(Gjft$pRJ@?{(ZhK_fg$Y*NDc"
            "|mYmQ0^i}KulLza-RLkAN`m|>?=1DTPb91cQMIkTZdAOeVS2^ou(WNAxaQ^lmw38"
            "?l928y5YGEn0JPiYFwgp;tLL&MwU?2Hl+p}wD*ETGy5GS_FisjsL6z$?O<1IucE&"
            "{=DilB&`I8C1Ym7+$V^PLWM;L@1g1#d}v*Ztr>Q!rm)CsyKh=mQSkILueEtxCAg^"
            "G`?zFc5}i^qjPFmEu>-K`i<XwI`+@8IS<iGpxJqnB9HKRaL$$PwL?3K6T^SZfTIB"
            "d*vM}aA*fb`se+<7;D>fFdWY1H$M&w6@b`}*zsmc`?}7!xt(Bdn%U;<yG(uP&X#a"
            "BG?D9pwO^-|2pz)xVkHeT_FZU7^x#SA(yUjlTiL(i5Q~k}Oz_^YB^gr#0!7a;U;5"
            "E<%!`O&%F!db58Fg<r-g99%2Hf-l_;)))1_#XeN7YSU=5L?X&4^4EFx~q2!-uAgM"
            "wVv=ymS>0F_8PE)#iXou&9DpJe_}Sa%phxdI&$0`T8y|9h>*pviMPFu{4L4T<%-c"
            "WKSQRef&%$DuL7iYHZ5G^8x&Tkb#jh3%z<tW+_^O)UKmN9}CLNz|fUZA6Ge5L`;w"
            ")Aj#vLSP|T`BLckjiw!NWDqv!uTC(?6`a+pL7@x?cpl`uPCpRTY0O_ifJtiTP3n+"
            "=^0JEu5bpm-CE&=~<FvTBZR)SbS7u*2an2v6@6ZT)cZw~`PxhzKq{Otfyj+8sC&B"
            "cMQ@aTm<P*q{XXM|6Im=$UunHRnAzZ?DwJw%R@"
        ),
        dense=(
            "1f1f1f1f1f1f1f1f1f09091f1f1f1f1f1f1f1f1f1f1f1f1f1f1f1f1f1f1f1f1f"
            "17111d1f1f1f1f1f010115011f141f01100d100411100f0a060b011f180c141f"
            "041b0a1e010401011f010117160e0101071d01011f1f1f071f1f0f1f1f0c1c01"
            "01091111010c0b101501170110010101010101010101011f010101010b1f1f1f"
            "0909090909090909090909090909090909090909090909090909090909090909"
            "0909090909090909090909090909090909090909090909090909090909090909"
            "0909090909090909090909090909090909090909090909090909090909090909"
            "0909090909090909090909090909090909090909090909090909090909090909"
        ),
        dense_unit=0.034674,
        dense_gate=0.3870,
        dense_case=0.9397,
        dense_digit=1.1212,
        dense_symbol=0.3226,
        runs=(
            (" ", 1.00, 2.00),
            ("\t", 4.00, 32.00),
            ("\n", 2.00, 16.00),
            ("\r", 32.00, 256.00),
            ("=", 1.00, 4.00),
            ("-", 1.00, 4.00),
            ("_", 1.00, 4.00),
            ("*", 1.00, 4.00),
            ("#", 1.00, 4.00),
            (".", 1.00, 2.00),
            ("~", 2.00, 16.00),
            ("0", 11.00, 85.34),
            ("/", 1.00, 4.00),
            ("+", 4.00, 32.00),
            ("|", 8.00, 64.00),
            (":", 4.00, 32.00),
            ("<", 16.00, 128.00),
            (">", 8.00, 64.00),
            ("\\", 1.00, 8.00),
            ("`", 16.00, 128.00),
            ("'", 16.00, 128.00),
            ('"', 16.00, 128.00),
            ("─", 2.00, 16.00),
            ("━", 16.00, 128.00),
            ("═", 8.00, 64.00),
        ),
    ),
    "anthropic": Coefficients(
        table=(
            "1010101010101010100406101008101010101010101010101010101010101010"
            "04010a0b1f01011a011f0708120d1f1f141f09191514160d13041a0a1f040a01"
            "0601010a071f081f01011f0101011f010d1f01010a1f1f1f1f1f0f1f11010d15"
            "11021d0c15031f1317011f0609010101091f01030601060102171f1a1e170d10"
            "0909090909090909090909090909090909090909090909090909090909090909"
            "0909090909090909090909090909090909090909090909090909090909090909"
            "0101010101010101010101010101010101010101010101010101010101010101"
            "0101010101010101010101010101010101010101010101010101010101010101"
        ),
        pages=(
            "0016160f080e0a0a0a1010101010111f1f1f1f1f1f1f1f1f1f1f1f1f1f1f1f0f"
            "000f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0c0c0c0c000000000000000000000000"
            "0000000000000000000000000000070707070707070707070707070707070707"
            "0707070707070707070707070707070707070707070707070707070707070707"
            "0707070707070707070707070707070707070707070707070707070707070707"
            "1f1f1f1f1f1f1f1f1f1f1f1f1717171717171717171717171717171717171717"
            "1717171717171717171717171717171717171717171717170a0909090a0a0a0a"
            "1e1e1e1e1e1e1e1e1e1e1e1e1e1e1e1e1e1e1e1e1e1e1e1e1e0000000000000b"
        ),
        unit=0.034477,
        page_unit=0.103431,
        rare_cjk=1.1518,
        fixed=0.0000,
        cjk_single=(
            "c-pmAy>1gh5S|&Yt;LDZ+OeXPYeR90QUr-2<px|>qKQ(uG>C!%(a=)NAs42L1O=r"
            "Zf(Njyq^IU-nBDXF_RcxmL1d)F=bhPa{=S)W`st)+p7##n0MkoAaN}crV?gzXBfK"
            "z+gaDcdV4O|5^2wkfflMqp`LBVD=oz2~xrm`ymLxfl3!Oh`&p{v)a2(7I7cd<_`%"
            ";wtit?tjMkByyPGI3bS~Q%i20Q_mA<xvyC0<Owq4`YUW^$qg4#nJL{-|H}?_dwX("
            "zj6)%p_!js8UF?Q@sY{;5A5ht<x1(Hv^}*)up^<DpzQDprq)5+g-R-Frt-{>nrxY"
            "$u-%^5p7MVB9n=0!C_XLmEo8j|BMq*g6ow6d?v{foOdK`X<o8wuqZ6&*>K_3=1Fp"
            "u2^Hbj;)NL#4NR~^WwW~^_awEiMM|uEV5DFk_=R}|%?75e`fy8$Nsv0o9@(OxGxU"
            "9?SDNL}g}yARKt0B162}ivK9hm`8Awg+h9zhLJ91cVX-(yg+B_rL(fM5eB~EZ|BC"
            "SE?E3!V(+S{li2u*s`AS@%>b-1n)IpwVW7ipFI;7at^tcna%C%B|t)5;p6Ou_9j*"
            "D}AS+Ox#&w*6R;iDVfXl)7<UKkY!5C$2u2VbDhX0NctqT;2nU@+t{5t{$Baimt*V"
            "ik_gBF}e~-_};vqk*W^lRw5gx`a4^bLD7n5!_9#^HJj9?0(yJN)yYOkDq_6#Os;9"
            "^y>tH%Vfepdq7v)c#5wQWwM?wf4H5PtW-Q0=@b21L`+j~i()a9%N_zaEAKua7)E2"
            "a`*)VNkQDvRE-^OZa`^Q%dM{i`0+6Jj<P}<^>E>?-H+sXWk;86tQIdm?(yIfQjS&"
            "eIUzBM{4)fr6WV)y~WCK{l4WR+7p3uT`gpcmV>f!od@v){}6@rAHvU6dO47wy_$;"
            "Q"
        ),
        dense=(
            "1f1f1f1f1f1f1f1f1f091f1f1f091f1f1f1f1f1f1f1f1f1f1f1f1f1f1f1f1f1f"
            "0a010111011f031f010111011c141f0110120b09100e0e080c0c0315011f1a1f"
            "0e03121f0103010d0701041315120105071f01101f1f1f171f1f0f1f1f1b0101"
            "070a131108080e1114011f0d1501010101020101010109160101150113191f1f"
            "0909090909090909090909090909090909090909090909090909090909090909"
            "0909090909090909090909090909090909090909090909090909090909090909"
            "0909090909090909090909090909090909090909090909090909090909090909"
            "0909090909090909090909090909090909090909090909090909090909090909"
        ),
        dense_unit=0.034477,
        dense_gate=0.3848,
        dense_case=0.7208,
        dense_digit=0.8840,
        dense_symbol=1.0370,
        runs=(
            (" ", 1.00, 0.25),
            ("\t", 4.00, 32.00),
            ("\n", 1.00, 8.00),
            ("\r", 16.00, 128.00),
            ("=", 1.00, 4.00),
            ("-", 1.00, 1.00),
            ("_", 1.00, 4.00),
            ("*", 1.00, 4.00),
            ("#", 1.00, 4.00),
            (".", 1.00, 8.00),
            ("~", 1.00, 8.00),
            ("0", 1.00, 8.00),
            ("/", 1.00, 8.00),
            ("+", 1.00, 8.00),
            ("|", 16.00, 128.00),
            (":", 4.00, 32.00),
            ("<", 4.00, 32.00),
            (">", 2.00, 16.00),
            ("\\", 8.00, 64.00),
            ("`", 2.00, 16.00),
            ("'", 1.00, 8.00),
            ('"', 4.00, 32.00),
            ("─", 4.00, 32.00),
            ("━", 32.00, 256.00),
            ("═", 2.00, 16.00),
        ),
    ),
}
FAMILY_FLOOR: dict[str, float] = {
    "o200k": 0.60,
    "cl100k": 0.60,
    "deepseek": 0.60,
    "anthropic": 0.60,
}
# END FITTED
